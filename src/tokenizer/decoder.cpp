// Decoder chains: each step maps the list of token strings to a new list; the result is joined.
#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace vt {
namespace {

constexpr int kMaxDepth = 16;

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// ByteFallback's test: exactly "<0x" + two characters u8::from_str_radix(.., 16) accepts + ">".
int fallback_byte(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  if (token[3] == '+') return hex_digit(token[4]);  // Rust's from_str_radix takes a leading '+'
  const int high = hex_digit(token[3]), low = hex_digit(token[4]);
  return high < 0 || low < 0 ? -1 : high * 16 + low;
}

std::vector<uint32_t> code_points(std::string_view text) {
  std::vector<uint32_t> out;
  const auto* data = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t position = 0; position < text.size();) {
    uint32_t code_point = 0;
    const int length = utf8::decode(data + position, text.size() - position, &code_point);
    VT_CHECK(length > 0, "decoder: invalid UTF-8 in a token");
    out.push_back(code_point);
    position += size_t(length);
  }
  return out;
}

}  // namespace

void Decoder::add_steps(const nlohmann::json& json, const std::string& where, int depth,
                        std::vector<Step>& steps) {
  VT_CHECK(depth < kMaxDepth, where, ": decoders nested too deeply");
  const std::string type = json_string(json, "type", where);
  if (type == "Sequence") {
    const auto& list = json_array(json, "decoders", where);
    for (size_t i = 0; i < list.size(); ++i)
      add_steps(list[i], str(where, ".decoders[", i, "]"), depth + 1, steps);
  } else if (type == "ByteLevel") {
    steps.push_back({Kind::kByteLevel, nullptr, {}, 0, 0});
  } else if (type == "ByteFallback") {
    steps.push_back({Kind::kByteFallback, nullptr, {}, 0, 0});
  } else if (type == "Fuse") {
    steps.push_back({Kind::kFuse, nullptr, {}, 0, 0});
  } else if (type == "Replace") {
    steps.push_back({Kind::kReplace, std::make_shared<Regex>(json_pattern(json, where)),
                     json_string(json, "content", where), 0, 0});
  } else if (type == "Strip") {
    const std::string content = json_string(json, "content", where);
    VT_CHECK(code_points(content).size() == 1, where, ".content: expected one character");
    const int64_t start = json_int(json, "start", where), stop = json_int(json, "stop", where);
    VT_CHECK(start >= 0 && stop >= 0, where, ": start and stop must be non-negative");
    steps.push_back({Kind::kStrip, nullptr, content, size_t(start), size_t(stop)});
  } else {
    VT_FAIL(where, ": decoder type '", type,
            "' is not supported (supported: Sequence, ByteLevel, ByteFallback, ",
            "Fuse, Replace, Strip)");
  }
}

Decoder Decoder::from_json(const nlohmann::json& json, const std::string& where) {
  Decoder decoder;
  if (json.is_null()) return decoder;
  decoder.present_ = true;
  add_steps(json, where, 0, decoder.steps_);
  return decoder;
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  if (!present_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out.append(i ? " " : "").append(tokens[i]);
    return out;
  }
  std::vector<std::string> next;
  std::vector<Span> matches;
  for (const Step& step : steps_) {
    next.clear();
    switch (step.kind) {
      case Kind::kByteLevel: {
        // Per token: its bytes through the alphabet, or its own UTF-8 when a character is not in
        // it.
        std::string bytes, all;
        for (const std::string& token : tokens) {
          if (byte_level::to_bytes(token, bytes))
            all += bytes;
          else
            all += token;
        }
        next.push_back(utf8::replace_invalid(all));
        break;
      }
      case Kind::kByteFallback: {
        std::string run;
        size_t run_tokens = 0;
        auto flush = [&] {
          if (run_tokens == 0) return;
          if (utf8::is_valid(run))
            next.push_back(run);
          else
            for (size_t i = 0; i < run_tokens; ++i) next.emplace_back(utf8::kReplacement);
          run.clear();
          run_tokens = 0;
        };
        for (std::string& token : tokens) {
          const int byte = fallback_byte(token);
          if (byte >= 0) {
            run += char(byte);
            ++run_tokens;
          } else {
            flush();
            next.push_back(std::move(token));
          }
        }
        flush();
        break;
      }
      case Kind::kFuse: {
        std::string all;
        for (const std::string& token : tokens) all += token;
        next.push_back(std::move(all));
        break;
      }
      case Kind::kReplace:
        for (const std::string& token : tokens) {
          matches.clear();
          step.pattern->find_all(token, matches);
          std::string replaced;
          size_t previous = 0;
          for (const Span& match : matches) {
            replaced.append(token, previous, match.begin - previous);
            replaced += step.content;
            previous = match.end;
          }
          replaced.append(token, previous, std::string::npos);
          next.push_back(std::move(replaced));
        }
        break;
      case Kind::kStrip: {
        const uint32_t content = code_points(step.content)[0];
        for (const std::string& token : tokens) {
          const std::vector<uint32_t> chars = code_points(token);
          size_t start_cut = 0, stop_cut = chars.size();
          for (size_t i = 0; i < step.start && i < chars.size() && chars[i] == content; ++i)
            start_cut = i + 1;
          for (size_t i = 0;
               i < step.stop && i < chars.size() && chars[chars.size() - 1 - i] == content; ++i)
            stop_cut = chars.size() - 1 - i;
          std::string stripped;
          for (size_t i = start_cut; i < stop_cut; ++i) utf8::append(stripped, chars[i]);
          next.push_back(std::move(stripped));
        }
        break;
      }
    }
    tokens.swap(next);
  }
  std::string out;
  for (const std::string& token : tokens) out += token;
  return out;
}

bool Decoder::bytes_per_token() const {
  if (!present_ || steps_.empty() || steps_.back().kind != Kind::kByteLevel) return false;
  for (size_t i = 0; i + 1 < steps_.size(); ++i) {
    const Kind kind = steps_[i].kind;
    if (kind != Kind::kByteFallback && kind != Kind::kFuse && kind != Kind::kReplace) return false;
  }
  return true;
}

bool Decoder::token_bytes(std::string_view token, std::string& bytes) const {
  bool fused = false;
  std::vector<Span> matches;
  for (size_t i = 0; i + 1 < steps_.size(); ++i) {
    const Step& step = steps_[i];
    if (step.kind == Kind::kFuse) fused = true;
    if (step.kind == Kind::kByteFallback && fallback_byte(token) >= 0) return false;
    if (step.kind == Kind::kReplace) {
      matches.clear();
      step.pattern->find_all(token, matches);
      if (!matches.empty()) return false;
    }
  }
  if (byte_level::to_bytes(token, bytes)) return true;
  // Unfused, ByteLevel keeps such a token's own UTF-8; fused, it would keep everyone's.
  if (fused) return false;
  bytes.assign(token);
  return true;
}

bool Decoder::is_byte_token(std::string_view token) const {
  for (const Step& step : steps_)
    if (step.kind == Kind::kByteFallback) return fallback_byte(token) >= 0;
  return false;
}

}  // namespace vt
