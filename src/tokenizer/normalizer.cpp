// Normalizers: Unicode forms through utf8proc (with a fast path for text they cannot change).
#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/json_fields.h"

namespace vt {
namespace {

// Code points below U+0300 are NFC already and never compose with what follows; their UTF-8
// lead bytes are all below 0xCC. Compatibility forms only leave ASCII alone for sure.
bool unchanged_by(std::string_view text, bool compatibility, bool compose) {
  const unsigned char limit = (compose && !compatibility) ? 0xCC : 0x80;
  for (char c : text)
    if (static_cast<unsigned char>(c) >= limit) return false;
  return true;
}

void unicode_form(std::string_view text, int options, std::string& out) {
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t size = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                             utf8proc_ssize_t(text.size()), &result,
                                             utf8proc_option_t(options | UTF8PROC_STABLE));
  if (size < 0) VT_FAIL("normalizer: ", utf8proc_errmsg(size));
  out.assign(reinterpret_cast<const char*>(result), size_t(size));
  std::free(result);
}

}  // namespace

void Normalizer::add_steps(const nlohmann::json& json, const std::string& where, int depth,
                           std::vector<Step>& steps) {
  VT_CHECK(depth < 16, where, ": nested too deeply");
  const std::string type = json_string(json, "type", where);
  if (type == "Sequence") {
    const auto& list = json_array(json, "normalizers", where);
    for (size_t i = 0; i < list.size(); ++i)
      add_steps(list[i], str(where, ".normalizers[", i, "]"), depth + 1, steps);
  } else if (type == "NFC") {
    steps.push_back({Kind::kNfc, {}, nullptr});
  } else if (type == "NFD") {
    steps.push_back({Kind::kNfd, {}, nullptr});
  } else if (type == "NFKC") {
    steps.push_back({Kind::kNfkc, {}, nullptr});
  } else if (type == "NFKD") {
    steps.push_back({Kind::kNfkd, {}, nullptr});
  } else if (type == "Prepend") {
    steps.push_back({Kind::kPrepend, json_string(json, "prepend", where), nullptr});
  } else if (type == "Replace") {
    steps.push_back({Kind::kReplace, json_string(json, "content", where),
                     std::make_shared<Regex>(json_pattern(json, where))});
  } else {
    VT_FAIL(where, ": normalizer type '", type,
            "' is not supported (supported: Sequence, NFC, NFD, NFKC, ", "NFKD, Prepend, Replace)");
  }
}

Normalizer Normalizer::from_json(const nlohmann::json& json, const std::string& where) {
  Normalizer normalizer;
  add_steps(json, where, 0, normalizer.steps_);
  return normalizer;
}

void Normalizer::normalize(std::string_view text, std::string& out) const {
  out.assign(text);
  std::string scratch;
  std::vector<Span> matches;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kNfc:
        if (!unchanged_by(out, false, true))
          unicode_form(out, UTF8PROC_COMPOSE, scratch), out.swap(scratch);
        break;
      case Kind::kNfd:
        if (!unchanged_by(out, false, false))
          unicode_form(out, UTF8PROC_DECOMPOSE, scratch), out.swap(scratch);
        break;
      case Kind::kNfkc:
        if (!unchanged_by(out, true, true))
          unicode_form(out, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, scratch), out.swap(scratch);
        break;
      case Kind::kNfkd:
        if (!unchanged_by(out, true, false))
          unicode_form(out, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, scratch), out.swap(scratch);
        break;
      case Kind::kPrepend:
        if (!out.empty()) out.insert(0, step.text);  // HF prepends only to non-empty text
        break;
      case Kind::kReplace: {
        matches.clear();
        step.regex->find_all(out, matches);
        if (matches.empty()) break;
        scratch.clear();
        size_t previous = 0;
        for (const Span& match : matches) {
          scratch.append(out, previous, match.begin - previous);
          scratch += step.text;
          previous = match.end;
        }
        scratch.append(out, previous, std::string::npos);
        out.swap(scratch);
        break;
      }
    }
  }
}

}  // namespace vt
