// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): Split (regex or string, every delimiter
// behaviour, invert), Digits, ByteLevel (optional GPT-2 regex and prefix space) and Sequence.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "tokenizer/regex.h"

namespace vt {

class PreTokenizer {
 public:
  static PreTokenizer from_json(const nlohmann::json& json, const std::string& where);

  // Splits buffer into pieces (spans of buffer), appended to `pieces`. Steps that insert text
  // (ByteLevel's prefix space) rewrite buffer. Byte-level mapping is not applied here: a
  // byte-level model works on raw bytes directly.
  void split(std::string& buffer, std::vector<Span>& pieces) const;

  // Whether the last step is ByteLevel, i.e. the model sees one symbol per byte.
  bool byte_level() const { return byte_level_; }
  bool empty() const { return steps_.empty(); }

 private:
  enum class Kind { kSplit, kDigits, kByteLevel };
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    Kind kind = Kind::kSplit;
    std::shared_ptr<Regex> regex;  // kSplit, and kByteLevel with use_regex
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;   // kByteLevel
    bool individual_digits = false;  // kDigits
  };
  struct Segment {
    Span span;
    bool is_match;
  };

  static void add_steps(const nlohmann::json& json, const std::string& where, int depth,
                        std::vector<Step>& steps);
  static void apply_behavior(const std::vector<Segment>& segments, Behavior behavior,
                             std::vector<Span>& out);
  void run_step(const Step& step, std::string& buffer, std::vector<Span>& pieces) const;

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace vt
