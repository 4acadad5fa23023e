// PCRE2 wrapper: compile once with JIT; match with per-thread match data and JIT stack.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/error.h"

namespace vt {
namespace {

// Unicode White_Space (what Oniguruma's \s matches in UTF-8 mode).
constexpr std::string_view kWhiteSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{"
    "202F}"
    "\\x{205F}\\x{3000}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Per-thread scratch: match data with one pair (only the whole match is read) and a JIT stack large
// enough for long runs (100k spaces against \s+(?!\S)).
struct ThreadScratch {
  pcre2_match_data* match_data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadScratch() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
  ~ThreadScratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(match_data);
  }
};

ThreadScratch& scratch() {
  thread_local ThreadScratch instance;
  return instance;
}

}  // namespace

std::string onig_compatible_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        if (in_class) {
          out += kWhiteSpace;
        } else {
          out += '[';
          out += kWhiteSpace;
          out += ']';
        }
      } else if (next == 'S') {
        VT_CHECK(!in_class, "regex '", std::string(pattern),
                 "': \\S inside a character class is not supported");
        out += "[^";
        out += kWhiteSpace;
        out += ']';
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(std::string_view pattern, bool literal) : pattern_(pattern) {
  const std::string compiled = literal ? std::string(pattern) : onig_compatible_pattern(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2_LITERAL admits no PCRE2_UCP (it has no classes to apply it to).
  const uint32_t options = literal ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (code == nullptr)
    VT_FAIL("regex '", pattern_, "': ", pcre2_message(error_code), " at offset ", error_offset);
  // JIT is an optimisation: where it is unavailable the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

Regex::~Regex() {
  if (code_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

Regex::Regex(Regex&& other) noexcept : pattern_(std::move(other.pattern_)), code_(other.code_) {
  other.code_ = nullptr;
}

Regex& Regex::operator=(Regex&& other) noexcept {
  if (this != &other) {
    if (code_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(code_));
    pattern_ = std::move(other.pattern_);
    code_ = other.code_;
    other.code_ = nullptr;
  }
  return *this;
}

void Regex::find_all(std::string_view text, std::vector<Span>& matches) const {
  auto* code = static_cast<pcre2_code*>(code_);
  ThreadScratch& thread = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  while (offset < text.size()) {
    const int status = pcre2_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK,
                                   thread.match_data, thread.context);
    if (status == PCRE2_ERROR_NOMATCH) break;
    if (status < 0) VT_FAIL("regex '", pattern_, "': match failed: ", pcre2_message(status));
    const PCRE2_SIZE* vector = pcre2_get_ovector_pointer(thread.match_data);
    const size_t begin = vector[0], end = vector[1];
    if (end > begin) {
      matches.push_back({begin, end});
      offset = end;
    } else {
      // Empty match: step over one character, as Oniguruma's iterator does.
      offset = begin + 1;
      while (offset < text.size() && (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80)
        ++offset;
    }
  }
}

}  // namespace vt
