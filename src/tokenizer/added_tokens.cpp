// Added-token matching, after HF tokenizers' AddedVocabulary::find_matches.
#include "tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"

namespace vt {
namespace {

// Rust's char::is_whitespace is the White_Space property.
bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// HF's single_word test: letters, numbers and '_' make words.
bool is_word_character(uint32_t c) {
  if (c == '_') return true;
  const auto category = utf8proc_category(utf8proc_int32_t(c));
  return (category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO) ||
         (category >= UTF8PROC_CATEGORY_ND && category <= UTF8PROC_CATEGORY_NO);
}

uint32_t last_code_point(std::string_view text) {
  size_t begin = text.size() - 1;
  while (begin > 0 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
  uint32_t code_point = 0;
  utf8::decode(reinterpret_cast<const unsigned char*>(text.data()) + begin, text.size() - begin,
               &code_point);
  return code_point;
}

uint32_t first_code_point(std::string_view text, int* length) {
  uint32_t code_point = 0;
  *length =
      utf8::decode(reinterpret_cast<const unsigned char*>(text.data()), text.size(), &code_point);
  return code_point;
}

}  // namespace

void AddedVocabulary::build(std::vector<AddedToken> tokens, const Normalizer* normalizer) {
  // A content given twice keeps its last id, as HF's content -> token map does.
  std::unordered_map<std::string, size_t> last;
  for (size_t i = 0; i < tokens.size(); ++i) last[tokens[i].content] = i;
  tokens_.clear();
  for (size_t i = 0; i < tokens.size(); ++i)
    if (last[tokens[i].content] == i) tokens_.push_back(std::move(tokens[i]));
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& token = tokens_[i];
    VT_CHECK(!token.content.empty(), "added token ", token.id, " has empty content");
    by_id_[token.id] = i;
    by_content_[token.content] = token.id;
    std::string text = token.content;
    if (token.normalized && normalizer != nullptr) normalizer->normalize(token.content, text);
    if (text.empty()) continue;
    MatchSet& set = token.normalized ? normalized_ : raw_;
    has_normalized_ = has_normalized_ || token.normalized;
    set.by_first_byte[static_cast<unsigned char>(text[0])].push_back({text, i});
  }
  for (MatchSet* set : {&raw_, &normalized_})
    for (auto& list : set->by_first_byte)
      std::stable_sort(list.begin(), list.end(), [](const Entry& a, const Entry& b) {
        return a.text.size() > b.text.size();
      });
}

const AddedToken* AddedVocabulary::find(int32_t id) const {
  auto found = by_id_.find(id);
  return found == by_id_.end() ? nullptr : &tokens_[found->second];
}

int32_t AddedVocabulary::find(std::string_view content) const {
  auto found = by_content_.find(std::string(content));
  return found == by_content_.end() ? -1 : found->second;
}

void AddedVocabulary::split(std::string_view text, bool normalized_set, bool skip_special,
                            std::vector<TextSegment>& out) const {
  const MatchSet& set = normalized_set ? normalized_ : raw_;
  size_t segment_start = 0;  // HF's start_offset: where the pending text segment begins
  size_t position = 0;
  while (position < text.size()) {
    const auto& candidates = set.by_first_byte[static_cast<unsigned char>(text[position])];
    const Entry* match = nullptr;
    for (const Entry& entry : candidates) {
      if (text.compare(position, entry.text.size(), entry.text) == 0) {
        match = &entry;
        break;  // longest first
      }
    }
    if (match == nullptr) {
      ++position;
      continue;
    }
    const AddedToken& token = tokens_[match->token];
    size_t start = position, stop = position + match->text.size();
    position = stop;  // the matcher resumes after a match even when the match is then ignored
    if (skip_special && token.special) continue;
    if (token.single_word) {
      const bool space_before =
          start == 0 || !is_word_character(last_code_point(text.substr(0, start)));
      int length = 0;
      const bool space_after =
          stop == text.size() || !is_word_character(first_code_point(text.substr(stop), &length));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t begin = new_start - 1;
        while (begin > 0 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
        uint32_t code_point = 0;
        utf8::decode(reinterpret_cast<const unsigned char*>(text.data()) + begin, new_start - begin,
                     &code_point);
        if (!is_white_space(code_point)) break;
        new_start = begin;
      }
      start = std::max(new_start, segment_start);
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        int length = 0;
        const uint32_t code_point = first_code_point(text.substr(stop), &length);
        if (length <= 0 || !is_white_space(code_point)) break;
        stop += size_t(length);
      }
      position = stop;
    }
    if (segment_start < start) out.push_back({{segment_start, start}, -1});
    out.push_back({{start, stop}, token.id});
    segment_start = stop;
  }
  if (segment_start < text.size()) out.push_back({{segment_start, text.size()}, -1});
}

}  // namespace vt
