// Jinja lexer over code points. Mirrors jinja2/lexer.py: the root rule finds the next tag start,
// strips data by the tag's sign or lstrip_blocks; tags are lexed until their end marker, which only
// counts while brackets are balanced.
#include "jinja/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "jinja/unicode.h"

namespace vt::jinja {
namespace {

bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool is_name_start(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char32_t c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  Lexer(std::u32string source, const LexerOptions& options) : s_(std::move(source)), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < s_.size(); ++i)
      if (s_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      const size_t start = find_tag_start(pos);
      if (start == std::u32string::npos) {
        emit_data(pos, s_.substr(pos));
        break;
      }
      const char32_t type = s_[start + 1];
      const char32_t sign = at(start + 2) == '-' || at(start + 2) == '+' ? at(start + 2) : 0;
      size_t raw_end = 0;
      const bool raw = type == '%' && match_raw_begin(start, raw_end);
      std::u32string text = s_.substr(pos, start - pos);
      strip_before_tag(text, sign, type != '{', line_starting);
      emit_data(pos, std::move(text));
      line_starting = false;
      pos = start + 2 + (sign ? 1 : 0);
      if (raw) {
        line_starting = raw_end > 0 && s_[raw_end - 1] == '\n';
        pos = lex_raw(raw_end, line_starting, start);
        line_starting = s_[pos - 1] == '\n';
      } else if (type == '#') {
        pos = skip_comment(pos, start, line_starting);
      } else {
        pos = lex_tag(pos, type == '%', start, line_starting);
      }
    }
    tokens_.push_back(Token{Token::Kind::kEof, "", 0, 0, locate(s_.size())});
    return std::move(tokens_);
  }

 private:
  char32_t at(size_t i) const { return i < s_.size() ? s_[i] : 0; }
  bool starts_with(size_t i, std::u32string_view prefix) const {
    return s_.compare(i, prefix.size(), prefix) == 0;
  }
  size_t skip_space(size_t i) const {
    while (i < s_.size() && unicode::is_space(s_[i])) ++i;
    return i;
  }

  Location locate(size_t offset) const {
    size_t line = 0, low = 0, high = line_starts_.size();
    while (low < high) {  // last line start <= offset
      const size_t mid = (low + high) / 2;
      if (line_starts_[mid] <= offset) line = mid, low = mid + 1;
      else high = mid;
    }
    return Location{int(line + 1), int(offset - line_starts_[line] + 1)};
  }

  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    throw TemplateError(TemplateError::Kind::kSyntax, message, locate(offset));
  }

  size_t find_tag_start(size_t pos) const {
    for (size_t i = pos; i + 1 < s_.size(); ++i)
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    return std::u32string::npos;
  }

  // `{%` sign? \s* raw \s* (`-%}` \s* | `%}`): no trim_blocks after a raw opener, as in jinja2.
  bool match_raw_begin(size_t start, size_t& end) const {
    size_t i = start + 2;
    if (at(i) == '-' || at(i) == '+') ++i;
    i = skip_space(i);
    if (!starts_with(i, U"raw")) return false;
    i = skip_space(i + 3);
    if (starts_with(i, U"-%}")) return end = skip_space(i + 3), true;
    if (starts_with(i, U"%}")) return end = i + 2, true;
    return false;
  }

  // jinja2's OptionalLStrip: `-` strips all whitespace before the tag; otherwise lstrip_blocks
  // drops the whitespace between the line start and a block/comment tag.
  void strip_before_tag(std::u32string& text, char32_t sign, bool block_like, bool line_starting) const {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0 && unicode::is_space(text[end - 1])) --end;
      text.resize(end);
    } else if (sign != '+' && options_.lstrip_blocks && block_like) {
      const size_t newline = text.rfind('\n');
      const size_t line_begin = newline == std::u32string::npos ? 0 : newline + 1;
      if (line_begin > 0 || line_starting) {
        bool all_space = line_begin < text.size();
        for (size_t i = line_begin; i < text.size() && all_space; ++i) all_space = unicode::is_space(text[i]);
        if (all_space) text.resize(line_begin);
      }
    }
  }

  void emit_data(size_t offset, std::u32string text) {
    if (text.empty()) return;
    tokens_.push_back(Token{Token::Kind::kData, unicode::encode(text), 0, 0, locate(offset)});
  }

  void emit(Token::Kind kind, size_t offset, std::string text = {}) {
    tokens_.push_back(Token{kind, std::move(text), 0, 0, locate(offset)});
  }

  // After `{% raw %}`: data up to `{%` sign? \s* endraw \s* (`+%}` | `-%}` \s* | `%}` \n?).
  size_t lex_raw(size_t pos, bool line_starting, size_t tag_start) {
    for (size_t i = pos; i + 1 < s_.size(); ++i) {
      if (s_[i] != '{' || s_[i + 1] != '%') continue;
      size_t j = i + 2;
      const char32_t sign = at(j) == '-' || at(j) == '+' ? at(j) : 0;
      if (sign) ++j;
      j = skip_space(j);
      if (!starts_with(j, U"endraw")) continue;
      j = skip_space(j + 6);
      size_t end;
      if (starts_with(j, U"+%}")) end = j + 3;
      else if (starts_with(j, U"-%}")) end = skip_space(j + 3);
      else if (starts_with(j, U"%}")) end = j + 2 + (options_.trim_blocks && at(j + 2) == '\n' ? 1 : 0);
      else continue;
      std::u32string text = s_.substr(pos, i - pos);
      strip_before_tag(text, sign, true, line_starting);
      emit_data(pos, std::move(text));
      return end;
    }
    fail(tag_start, "missing end of raw directive ({% endraw %})");
  }

  size_t skip_comment(size_t pos, size_t tag_start, bool& line_starting) {
    for (size_t i = pos; i < s_.size(); ++i) {
      size_t end = 0;
      if (starts_with(i, U"+#}")) end = i + 3;
      else if (starts_with(i, U"-#}")) end = skip_space(i + 3);
      else if (starts_with(i, U"#}")) end = i + 2 + (options_.trim_blocks && at(i + 2) == '\n' ? 1 : 0);
      else continue;
      line_starting = s_[end - 1] == '\n';
      return end;
    }
    fail(tag_start, "missing end of comment tag (#})");
  }

  size_t lex_tag(size_t pos, bool block, size_t tag_start, bool& line_starting) {
    emit(block ? Token::Kind::kBlockBegin : Token::Kind::kVariableBegin, tag_start);
    std::vector<char32_t> balance;
    while (true) {
      if (pos >= s_.size())
        fail(tag_start, block ? "'{%' tag is never closed with '%}'" : "'{{' tag is never closed with '}}'");
      if (balance.empty()) {
        size_t end = 0;
        if (block) {
          if (starts_with(pos, U"+%}")) end = pos + 3;
          else if (starts_with(pos, U"-%}")) end = skip_space(pos + 3);
          else if (starts_with(pos, U"%}")) end = pos + 2 + (options_.trim_blocks && at(pos + 2) == '\n' ? 1 : 0);
        } else {
          if (starts_with(pos, U"-}}")) end = skip_space(pos + 3);
          else if (starts_with(pos, U"}}")) end = pos + 2;
        }
        if (end) {
          emit(block ? Token::Kind::kBlockEnd : Token::Kind::kVariableEnd, pos);
          line_starting = s_[end - 1] == '\n';
          return end;
        }
      }
      const char32_t c = s_[pos];
      if (unicode::is_space(c)) {
        pos = skip_space(pos);
      } else if (size_t end = match_float(pos); end) {
        lex_float(pos, end);
        pos = end;
      } else if (size_t end = match_integer(pos); end) {
        lex_integer(pos, end);
        pos = end;
      } else if (is_name_start(c)) {
        size_t end = pos;
        while (end < s_.size() && is_name_char(s_[end])) ++end;
        emit(Token::Kind::kName, pos, unicode::encode(s_.substr(pos, end - pos)));
        pos = end;
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        pos = lex_operator(pos, balance);
      }
    }
  }

  // (\d+_)*\d+ : digits, single underscores between them.
  size_t match_digits(size_t i) const {
    if (!is_digit(at(i))) return 0;
    while (is_digit(at(i))) ++i;
    while (at(i) == '_' && is_digit(at(i + 1))) {
      ++i;
      while (is_digit(at(i))) ++i;
    }
    return i;
  }

  size_t match_exponent(size_t i) const {
    if (at(i) != 'e' && at(i) != 'E') return 0;
    ++i;
    if (at(i) == '+' || at(i) == '-') ++i;
    return match_digits(i);
  }

  // jinja2's float_re: not after a dot; digits, then a fraction and/or an exponent.
  size_t match_float(size_t i) const {
    if (i > 0 && s_[i - 1] == '.') return 0;
    const size_t whole = match_digits(i);
    if (!whole) return 0;
    size_t fraction = 0;
    if (at(whole) == '.') fraction = match_digits(whole + 1);
    if (fraction) {
      if (size_t exponent = match_exponent(fraction)) return exponent;
      return fraction;
    }
    return match_exponent(whole);
  }

  size_t match_integer(size_t i) const {
    auto prefixed = [&](char32_t letter, auto valid) -> size_t {
      if (at(i) != '0' || (at(i + 1) != letter && at(i + 1) != letter - 32)) return 0;
      size_t j = i + 2, end = 0;
      while (true) {
        const size_t k = at(j) == '_' ? j + 1 : j;
        if (!valid(at(k))) break;
        j = end = k + 1;
      }
      return end;
    };
    auto is_hex = [](char32_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); };
    if (size_t end = prefixed('b', [](char32_t c) { return c == '0' || c == '1'; })) return end;
    if (size_t end = prefixed('o', [](char32_t c) { return c >= '0' && c <= '7'; })) return end;
    if (size_t end = prefixed('x', is_hex)) return end;
    const bool zero = at(i) == '0';
    if (!is_digit(at(i))) return 0;
    size_t j = i + 1;
    while (true) {
      const size_t k = at(j) == '_' ? j + 1 : j;
      if (zero ? at(k) != '0' : !is_digit(at(k))) break;
      j = k + 1;
    }
    return j;
  }

  std::string digits_without_underscores(size_t begin, size_t end) const {
    std::string text;
    for (size_t i = begin; i < end; ++i)
      if (s_[i] != '_') text.push_back(static_cast<char>(s_[i]));
    return text;
  }

  void lex_float(size_t begin, size_t end) {
    const std::string text = digits_without_underscores(begin, end);
    Token token{Token::Kind::kFloat, text, 0, std::strtod(text.c_str(), nullptr), locate(begin)};
    tokens_.push_back(std::move(token));
  }

  void lex_integer(size_t begin, size_t end) {
    std::string text = digits_without_underscores(begin, end);
    int base = 10;
    std::string digits = text;
    if (text.size() > 1 && text[0] == '0' && std::isalpha(static_cast<unsigned char>(text[1]))) {
      const char prefix = static_cast<char>(std::tolower(text[1]));
      base = prefix == 'b' ? 2 : prefix == 'o' ? 8 : 16;
      digits = text.substr(2);
    }
    errno = 0;
    char* stop = nullptr;
    const long long value = std::strtoll(digits.c_str(), &stop, base);
    if (errno == ERANGE) throw TemplateError(TemplateError::Kind::kUnsupported,
                                             "integer literal " + text + " (vt uses 64-bit integers)", locate(begin));
    tokens_.push_back(Token{Token::Kind::kInteger, text, value, 0, locate(begin)});
  }

  // Python string literal rules, as jinja2 decodes them with the unicode-escape codec.
  size_t lex_string(size_t begin) {
    const char32_t quote = s_[begin];
    size_t i = begin + 1;
    std::u32string value;
    auto hex_escape = [&](size_t digits) {
      char32_t code = 0;
      for (size_t k = 0; k < digits; ++k) {
        const char32_t c = at(i + 1 + k);
        int digit = is_digit(c) ? int(c - '0') : (c >= 'a' && c <= 'f') ? int(c - 'a' + 10)
                                                : (c >= 'A' && c <= 'F') ? int(c - 'A' + 10) : -1;
        if (digit < 0) fail(i, "truncated \\x, \\u or \\U escape in string literal");
        code = code * 16 + char32_t(digit);
      }
      if (code > 0x10FFFF) fail(i, "illegal Unicode character in string literal");
      value.push_back(code);
      i += 1 + digits;
    };
    while (true) {
      if (i >= s_.size()) fail(begin, "unterminated string literal");
      const char32_t c = s_[i];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c), ++i;
        continue;
      }
      const char32_t next = at(i + 1);
      ++i;  // i now at the escape letter
      switch (next) {
        case '\n': ++i; break;
        case '\\': value.push_back('\\'), ++i; break;
        case '\'': value.push_back('\''), ++i; break;
        case '"': value.push_back('"'), ++i; break;
        case 'a': value.push_back('\a'), ++i; break;
        case 'b': value.push_back('\b'), ++i; break;
        case 'f': value.push_back('\f'), ++i; break;
        case 'n': value.push_back('\n'), ++i; break;
        case 'r': value.push_back('\r'), ++i; break;
        case 't': value.push_back('\t'), ++i; break;
        case 'v': value.push_back('\v'), ++i; break;
        case 'x': hex_escape(2); break;
        case 'u': hex_escape(4); break;
        case 'U': hex_escape(8); break;
        case 'N': throw TemplateError(TemplateError::Kind::kUnsupported, "\\N{...} escapes in string literals", locate(i));
        default:
          if (next >= '0' && next <= '7') {
            char32_t code = 0;
            for (int k = 0; k < 3 && at(i) >= '0' && at(i) <= '7'; ++k, ++i) code = code * 8 + (at(i) - '0');
            value.push_back(code);
          } else if (next >= 0x80) {
            // The codec sees the character backslash-escaped: `\` then e.g. `xe9` as literal text.
            char escape[16];
            if (next < 0x100) std::snprintf(escape, sizeof(escape), "\\x%02x", unsigned(next));
            else if (next < 0x10000) std::snprintf(escape, sizeof(escape), "\\u%04x", unsigned(next));
            else std::snprintf(escape, sizeof(escape), "\\U%08x", unsigned(next));
            value.push_back('\\');
            for (const char* p = escape; *p; ++p) value.push_back(char32_t(*p));
            ++i;
          } else {
            value.push_back('\\');  // unknown escapes keep their backslash
          }
      }
    }
    emit(Token::Kind::kString, begin, unicode::encode(value));
    return i + 1;
  }

  size_t lex_operator(size_t pos, std::vector<char32_t>& balance) {
    static const char32_t* const kOperators[] = {U"//", U"**", U"==", U"!=", U">=", U"<=", U"+", U"-",
                                                 U"/",  U"*",  U"%",  U"~",  U"[",  U"]",  U"(", U")",
                                                 U"{",  U"}",  U"=",  U".",  U":",  U"|",  U",", U";",
                                                 U"<",  U">"};
    for (const char32_t* op : kOperators) {
      const std::u32string_view spelling(op);
      if (!starts_with(pos, spelling)) continue;
      const char32_t c = spelling[0];
      if (spelling.size() == 1 && (c == '{' || c == '(' || c == '[')) {
        balance.push_back(c == '{' ? '}' : c == '(' ? ')' : ']');
      } else if (spelling.size() == 1 && (c == '}' || c == ')' || c == ']')) {
        if (balance.empty()) fail(pos, vt::str("unexpected '", char(c), "'"));
        const char32_t expected = balance.back();
        balance.pop_back();
        if (expected != c) fail(pos, vt::str("unexpected '", char(c), "', expected '", char(expected), "'"));
      }
      emit(Token::Kind::kOperator, pos, unicode::encode(spelling));
      return pos + spelling.size();
    }
    std::string shown;
    unicode::append(shown, s_[pos]);
    fail(pos, "unexpected character '" + shown + "'");
  }

  std::u32string s_;
  LexerOptions options_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  std::u32string points;
  try {
    points = unicode::decode(source, "template source");
  } catch (const TemplateError& error) {
    throw TemplateError(TemplateError::Kind::kSyntax, error.message());
  }
  // Newlines become \n, and one trailing newline is dropped (keep_trailing_newline=False).
  std::u32string normalized;
  normalized.reserve(points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i] == '\r') {
      normalized.push_back('\n');
      if (i + 1 < points.size() && points[i + 1] == '\n') ++i;
    } else {
      normalized.push_back(points[i]);
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(std::move(normalized), options).run();
}

}  // namespace vt::jinja
