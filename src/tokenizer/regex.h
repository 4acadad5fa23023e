// PCRE2 (JIT) regular expressions with the semantics of the Oniguruma engine HF tokenizers uses:
// UTF-8, Unicode properties, and \s / \S meaning the Unicode White_Space property.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace vt {

struct Span {
  size_t begin = 0, end = 0;
};

class Regex {
 public:
  // literal: match the pattern text itself (HF's Split/Replace with a "String" pattern).
  explicit Regex(std::string_view pattern, bool literal = false);
  ~Regex();
  Regex(Regex&& other) noexcept;
  Regex& operator=(Regex&& other) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends every non-overlapping non-empty match, left to right. text must be valid UTF-8.
  void find_all(std::string_view text, std::vector<Span>& matches) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
};

// Rewrites \s and \S to the White_Space property, which Oniguruma uses and PCRE2 10.42 does not
// quite (PCRE2 counts U+180E as a space). Exposed for tests.
std::string onig_compatible_pattern(std::string_view pattern);

}  // namespace vt
