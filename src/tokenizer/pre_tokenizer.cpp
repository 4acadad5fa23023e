// Pre-tokenizers, following HF tokenizers' split semantics (NormalizedString::split): matches and
// the gaps between them become segments, the delimiter behaviour folds them, empty pieces vanish.
#include "tokenizer/pre_tokenizer.h"

#include <utf8proc.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace vt {
namespace {

// GPT-2's pattern, which HF's ByteLevel pre-tokenizer applies when use_regex is true.
constexpr const char* kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

bool is_numeric(uint32_t code_point) {
  const auto category = utf8proc_category(utf8proc_int32_t(code_point));
  return category == UTF8PROC_CATEGORY_ND || category == UTF8PROC_CATEGORY_NL ||
         category == UTF8PROC_CATEGORY_NO;
}

}  // namespace

void PreTokenizer::add_steps(const nlohmann::json& json, const std::string& where, int depth,
                             std::vector<Step>& steps) {
  VT_CHECK(depth < 16, where, ": nested too deeply");
  const std::string type = json_string(json, "type", where);
  Step step;
  if (type == "Sequence") {
    const auto& list = json_array(json, "pretokenizers", where);
    for (size_t i = 0; i < list.size(); ++i)
      add_steps(list[i], str(where, ".pretokenizers[", i, "]"), depth + 1, steps);
    return;
  } else if (type == "Split") {
    step.kind = Kind::kSplit;
    step.regex = std::make_shared<Regex>(json_pattern(json, where));
    const std::string behavior = json_string(json, "behavior", where);
    if (behavior == "Removed")
      step.behavior = Behavior::kRemoved;
    else if (behavior == "Isolated")
      step.behavior = Behavior::kIsolated;
    else if (behavior == "MergedWithPrevious")
      step.behavior = Behavior::kMergedWithPrevious;
    else if (behavior == "MergedWithNext")
      step.behavior = Behavior::kMergedWithNext;
    else if (behavior == "Contiguous")
      step.behavior = Behavior::kContiguous;
    else
      VT_FAIL(where, ".behavior: unknown split behaviour '", behavior, "'");
    step.invert = json_bool_or(json, "invert", false, where);
  } else if (type == "Digits") {
    step.kind = Kind::kDigits;
    step.individual_digits = json_bool_or(json, "individual_digits", false, where);
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
    step.add_prefix_space = json_bool_or(json, "add_prefix_space", true, where);
    if (json_bool_or(json, "use_regex", true, where))
      step.regex = std::make_shared<Regex>(kByteLevelPattern);
  } else {
    VT_FAIL(where, ": pre-tokenizer type '", type,
            "' is not supported (supported: Sequence, Split, Digits, ", "ByteLevel)");
  }
  steps.push_back(std::move(step));
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& json, const std::string& where) {
  PreTokenizer pre_tokenizer;
  add_steps(json, where, 0, pre_tokenizer.steps_);
  for (size_t i = 0; i < pre_tokenizer.steps_.size(); ++i) {
    // After ByteLevel the text is in the byte alphabet; vt runs byte-level models on raw bytes,
    // which is only equivalent when nothing splits that alphabet afterwards.
    if (pre_tokenizer.steps_[i].kind == Kind::kByteLevel)
      VT_CHECK(i + 1 == pre_tokenizer.steps_.size(), where,
               ": a ByteLevel pre-tokenizer followed by other pre-tokenizers is not supported");
  }
  pre_tokenizer.byte_level_ =
      !pre_tokenizer.steps_.empty() && pre_tokenizer.steps_.back().kind == Kind::kByteLevel;
  return pre_tokenizer;
}

// HF's NormalizedString::split folds, one per behaviour; `out` gets the pieces kept.
void PreTokenizer::apply_behavior(const std::vector<Segment>& segments, Behavior behavior,
                                  std::vector<Span>& out) {
  switch (behavior) {
    case Behavior::kIsolated:
      for (const Segment& segment : segments) out.push_back(segment.span);
      return;
    case Behavior::kRemoved:
      for (const Segment& segment : segments)
        if (!segment.is_match) out.push_back(segment.span);
      return;
    case Behavior::kContiguous: {
      const size_t first = out.size();
      bool previous_match = false;
      for (const Segment& segment : segments) {
        if (segment.is_match == previous_match && out.size() > first)
          out.back().end = segment.span.end;
        else
          out.push_back(segment.span);
        previous_match = segment.is_match;
      }
      return;
    }
    case Behavior::kMergedWithPrevious: {
      const size_t first = out.size();
      bool previous_match = false;
      for (const Segment& segment : segments) {
        if (segment.is_match && !previous_match && out.size() > first)
          out.back().end = segment.span.end;
        else
          out.push_back(segment.span);
        previous_match = segment.is_match;
      }
      return;
    }
    case Behavior::kMergedWithNext: {
      std::vector<Span> reversed;
      bool previous_match = false;
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !reversed.empty())
          reversed.back().begin = it->span.begin;
        else
          reversed.push_back(it->span);
        previous_match = it->is_match;
      }
      out.insert(out.end(), reversed.rbegin(), reversed.rend());
      return;
    }
  }
}

void PreTokenizer::run_step(const Step& step, std::string& buffer,
                            std::vector<Span>& pieces) const {
  if (step.kind == Kind::kByteLevel && step.add_prefix_space) {
    std::string rebuilt;
    rebuilt.reserve(buffer.size() + pieces.size());
    for (Span& piece : pieces) {
      const size_t begin = rebuilt.size();
      if (buffer[piece.begin] != ' ') rebuilt += ' ';
      rebuilt.append(buffer, piece.begin, piece.end - piece.begin);
      piece = {begin, rebuilt.size()};
    }
    buffer.swap(rebuilt);
  }
  if (step.kind == Kind::kByteLevel && !step.regex) return;

  // Per-thread scratch: encode runs this for every text segment.
  thread_local std::vector<Span> result, matches, kept;
  thread_local std::vector<Segment> segments;
  result.clear();
  for (const Span& piece : pieces) {
    const std::string_view text(buffer.data() + piece.begin, piece.end - piece.begin);
    matches.clear();
    if (step.kind == Kind::kDigits) {
      // Every numeric character is one match (char::is_numeric in HF).
      const auto* data = reinterpret_cast<const unsigned char*>(text.data());
      for (size_t position = 0; position < text.size();) {
        uint32_t code_point = 0;
        const int length = utf8::decode(data + position, text.size() - position, &code_point);
        VT_CHECK(length > 0, "pre-tokenizer: invalid UTF-8");
        if (is_numeric(code_point)) matches.push_back({position, position + size_t(length)});
        position += size_t(length);
      }
    } else {
      step.regex->find_all(text, matches);
    }
    segments.clear();
    size_t previous = 0;
    for (const Span& match : matches) {
      if (match.begin > previous) segments.push_back({{previous, match.begin}, step.invert});
      segments.push_back({match, !step.invert});
      previous = match.end;
    }
    if (previous < text.size()) segments.push_back({{previous, text.size()}, step.invert});

    const Behavior behavior =
        step.kind == Kind::kSplit ? step.behavior
        : step.kind == Kind::kDigits
            ? (step.individual_digits ? Behavior::kIsolated : Behavior::kContiguous)
            : Behavior::kIsolated;
    kept.clear();
    apply_behavior(segments, behavior, kept);
    for (const Span& span : kept)
      if (span.end > span.begin)
        result.push_back({piece.begin + span.begin, piece.begin + span.end});
  }
  pieces.swap(result);
}

void PreTokenizer::split(std::string& buffer, std::vector<Span>& pieces) const {
  thread_local std::vector<Span> current;
  current.clear();
  if (!buffer.empty()) current.push_back({0, buffer.size()});
  for (const Step& step : steps_) run_step(step, buffer, current);
  pieces.insert(pieces.end(), current.begin(), current.end());
}

}  // namespace vt
