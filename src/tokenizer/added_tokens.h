// Added tokens of tokenizer.json ("added_tokens"): matched in the text before the model sees it,
// leftmost-longest as HF's aho-corasick does, with single_word / lstrip / rstrip and the
// normalized flag (normalized tokens are matched after the normalizer, the others before it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/regex.h"

namespace vt {

class Normalizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

struct TextSegment {
  Span span;
  int32_t token_id = -1;  // -1: plain text for the model
};

class AddedVocabulary {
 public:
  void build(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Splits text into added tokens and the text between them (segments cover text in order; text
  // segments are never empty). normalized_set: match the normalized tokens (text is normalized)
  // instead of the others. skip_special: special tokens are not matched (split_special_tokens).
  void split(std::string_view text, bool normalized_set, bool skip_special,
             std::vector<TextSegment>& out) const;

  bool has_normalized_tokens() const { return has_normalized_; }
  const AddedToken* find(int32_t id) const;
  int32_t find(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  struct Entry {
    std::string text;  // what is matched: the content, normalized for normalized tokens
    size_t token;      // index in tokens_
  };
  struct MatchSet {
    std::vector<std::vector<Entry>> by_first_byte =
        std::vector<std::vector<Entry>>(256);  // longest first
  };
  MatchSet raw_, normalized_;
  bool has_normalized_ = false;
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, int32_t> by_content_;
};

}  // namespace vt
