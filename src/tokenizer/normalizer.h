// Normalizers of tokenizer.json ("normalizer"): NFC, NFD, NFKC, NFKD (utf8proc), Prepend, Replace
// and Sequence. Applied to the text between added tokens, before pre-tokenization.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace vt {

class Normalizer {
 public:
  // json: the "normalizer" object (not null); where: its path, for error messages.
  static Normalizer from_json(const nlohmann::json& json, const std::string& where);

  // out = normalized text (valid UTF-8 in, valid UTF-8 out).
  void normalize(std::string_view text, std::string& out) const;
  bool empty() const { return steps_.empty(); }

 private:
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kPrepend, kReplace };
  struct Step {
    Kind kind;
    std::string text;              // kPrepend: the prefix; kReplace: the replacement
    std::shared_ptr<Regex> regex;  // kReplace
  };
  static void add_steps(const nlohmann::json& json, const std::string& where, int depth,
                        std::vector<Step>& steps);
  std::vector<Step> steps_;
};

}  // namespace vt
