// UTF-8 and the slice of Python's str semantics that templates reach: code-point indexing,
// str.isspace whitespace, case mapping, str.isprintable (for repr). Strings stay UTF-8 elsewhere.
#pragma once

#include <string>
#include <string_view>

namespace vt::jinja::unicode {

// Throws TemplateError on malformed UTF-8 (`what` names the text, e.g. "template source").
std::u32string decode(std::string_view text, const char* what = "string");
std::string encode(std::u32string_view text);
void append(std::string& out, char32_t code_point);
size_t length(std::string_view text);  // code points

bool is_space(char32_t c);      // Python str.isspace (also what Python's re `\s` matches)
bool is_printable(char32_t c);  // Python str.isprintable, for repr(); unassigned code points print
// Python str.strip/lstrip/rstrip: `chars` empty means whitespace.
std::string strip(std::string_view text, bool left, bool right, const std::u32string* chars = nullptr);

// Case mapping as Python's str.upper/lower/title/capitalize/swapcase. vt knows the cases of ASCII,
// Latin-1, Latin Extended-A, basic Greek and Cyrillic, and knows that CJK, kana, Hangul,
// punctuation, symbols and emoji have none; any other letter throws kUnsupported rather than
// map it wrongly.
std::string upper(std::string_view text);
std::string lower(std::string_view text);
std::string title(std::string_view text);
std::string capitalize(std::string_view text);
std::string swapcase(std::string_view text);
bool is_cased(char32_t c);
bool is_lower_char(char32_t c);
bool is_upper_char(char32_t c);

}  // namespace vt::jinja::unicode
