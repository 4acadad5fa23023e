// UTF-8 coding and Python-compatible whitespace, printability and case mapping for vt's Jinja engine.
#include "jinja/unicode.h"

#include <cstdio>

#include "jinja/error.h"

namespace vt::jinja::unicode {

std::u32string decode(std::string_view text, const char* what) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    int extra = 0;
    char32_t code_point = 0;
    if (lead < 0x80) {
      code_point = lead;
    } else if ((lead & 0xE0) == 0xC0) {
      extra = 1, code_point = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      extra = 2, code_point = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      extra = 3, code_point = lead & 0x07;
    } else {
      fail_render(vt::str(what, " is not valid UTF-8 (byte ", i, ")"));
    }
    if (i + extra >= text.size() && extra > 0)
      fail_render(vt::str(what, " is not valid UTF-8 (truncated sequence at byte ", i, ")"));
    for (int k = 1; k <= extra; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) fail_render(vt::str(what, " is not valid UTF-8 (byte ", i + k, ")"));
      code_point = (code_point << 6) | (next & 0x3F);
    }
    const bool overlong = (extra == 1 && code_point < 0x80) || (extra == 2 && code_point < 0x800) ||
                          (extra == 3 && code_point < 0x10000);
    if (overlong || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF))
      fail_render(vt::str(what, " is not valid UTF-8 (byte ", i, ")"));
    out.push_back(code_point);
    i += extra + 1;
  }
  return out;
}

void append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append(out, c);
  return out;
}

size_t length(std::string_view text) {
  size_t count = 0;
  for (char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool is_printable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0)) return false;     // Cc, and NBSP (Zs)
  if (is_space(c)) return false;                                // Zs, Zl, Zp
  if (c == 0xAD || (c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F ||
      c == 0x180E || (c >= 0x200B && c <= 0x200F) || (c >= 0x202A && c <= 0x202E) ||
      (c >= 0x2060 && c <= 0x206F) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) ||
      c == 0x110BD || (c >= 0x1D173 && c <= 0x1D17A) || c == 0xE0001 ||
      (c >= 0xE0020 && c <= 0xE007F))
    return false;  // Cf
  if ((c >= 0xE000 && c <= 0xF8FF) || c >= 0xF0000) return false;  // Co
  return true;
}

std::string strip(std::string_view text, bool left, bool right, const std::u32string* chars) {
  const std::u32string points = decode(text);
  auto stripped = [&](char32_t c) {
    return chars ? chars->find(c) != std::u32string::npos : is_space(c);
  };
  size_t begin = 0, end = points.size();
  if (left)
    while (begin < end && stripped(points[begin])) ++begin;
  if (right)
    while (end > begin && stripped(points[end - 1])) --end;
  return encode(std::u32string_view(points).substr(begin, end - begin));
}

namespace {

// Ranges known to hold no cased letters (mapping leaves them unchanged, correctly).
bool is_caseless(char32_t c) {
  return c < 0x41 || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0xB4) ||
         (c >= 0xB6 && c <= 0xBF && c != 0xBA && c != 0xAA) || c == 0xD7 || c == 0xF7 ||
         (c >= 0x2B0 && c <= 0x36F) ||    // modifier letters, combining marks
         (c >= 0x590 && c <= 0x109F) ||   // Hebrew .. Myanmar (no case)
         (c >= 0x1100 && c <= 0x11FF) ||  // Hangul Jamo
         (c >= 0x2000 && c <= 0x20FF) ||  // punctuation, super/subscripts, currency, marks
         (c >= 0x2190 && c <= 0x24B5) ||  // arrows, math, technical, control pictures, OCR
         (c >= 0x24EA && c <= 0x2BFF) ||  // box drawing .. misc symbols and arrows
         (c >= 0x2E80 && c <= 0xA4CF) ||  // CJK radicals .. Yi
         (c >= 0xAC00 && c <= 0xD7FF) ||  // Hangul syllables
         (c >= 0xE000 && c <= 0xFAFF) ||  // private use, CJK compatibility
         (c >= 0xFE00 && c <= 0xFF20) || (c >= 0xFF3B && c <= 0xFF40) || (c >= 0xFF5B && c <= 0xFFFF) ||
         (c >= 0x1F000 && c <= 0x1FAFF) ||  // emoji and pictographs
         (c >= 0x20000 && c <= 0x3FFFF);    // CJK extensions
}

// Simple one-to-one mappings; returns false for a letter outside the known tables.
bool simple_upper(char32_t c, char32_t& out) {
  out = c;
  if (c >= 'a' && c <= 'z') return out = c - 32, true;
  if (c < 0x80) return true;
  if (c == 0xB5) return out = 0x39C, true;
  if (c == 0xAA || c == 0xBA || c == 0xDF) return true;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return out = c - 32, true;
  if (c == 0xFF) return out = 0x178, true;
  if (c >= 0xC0 && c <= 0xDE) return true;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return out = 'I', true;
    if (c == 0x138 || c == 0x130 || c == 0x149 || c == 0x178) return true;
    if (c == 0x17F) return out = 'S', true;
    const bool odd_lower = (c <= 0x137) || (c >= 0x14A && c <= 0x177);
    if (odd_lower) return out = (c % 2 == 1) ? c - 1 : c, true;
    return out = (c % 2 == 0) ? c - 1 : c, true;  // 0139..0148, 0179..017E: even is lower
  }
  if (c >= 0x391 && c <= 0x3A9) return true;
  if (c >= 0x3B1 && c <= 0x3C9) return out = (c == 0x3C2) ? 0x3A3 : c - 32, true;
  if (c == 0x386 || (c >= 0x388 && c <= 0x38F && c != 0x38B && c != 0x38D) || c == 0x3AA || c == 0x3AB)
    return true;
  if (c == 0x3AC) return out = 0x386, true;
  if (c >= 0x3AD && c <= 0x3AF) return out = c - 37, true;
  if (c == 0x3CA || c == 0x3CB) return out = c - 32, true;
  if (c == 0x3CC) return out = 0x38C, true;
  if (c == 0x3CD || c == 0x3CE) return out = c - 63, true;
  if (c >= 0x400 && c <= 0x42F) return true;
  if (c >= 0x430 && c <= 0x44F) return out = c - 32, true;
  if (c >= 0x450 && c <= 0x45F) return out = c - 80, true;
  return is_caseless(c);
}

bool simple_lower(char32_t c, char32_t& out) {
  out = c;
  if (c >= 'A' && c <= 'Z') return out = c + 32, true;
  if (c < 0x80) return true;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return out = c + 32, true;
  if (c >= 0xAA && c <= 0xFF) return true;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x178) return out = 0xFF, true;
    if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return true;
    const bool even_upper = (c <= 0x137) || (c >= 0x14A && c <= 0x177);
    if (even_upper) return out = (c % 2 == 0) ? c + 1 : c, true;
    return out = (c % 2 == 1) ? c + 1 : c, true;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return out = c + 32, true;
  if (c == 0x386) return out = 0x3AC, true;
  if (c >= 0x388 && c <= 0x38A) return out = c + 37, true;
  if (c == 0x38C) return out = 0x3CC, true;
  if (c == 0x38E || c == 0x38F) return out = c + 63, true;
  if (c == 0x3AA || c == 0x3AB) return out = c + 32, true;
  if ((c >= 0x3AC && c <= 0x3CE) || c == 0x390) return true;
  if (c >= 0x400 && c <= 0x40F) return out = c + 80, true;
  if (c >= 0x410 && c <= 0x42F) return out = c + 32, true;
  if (c >= 0x430 && c <= 0x45F) return true;
  return is_caseless(c);
}

[[noreturn]] void fail_case(char32_t c) {
  char hex[16];
  std::snprintf(hex, sizeof(hex), "U+%04X", static_cast<unsigned>(c));
  fail_unsupported(vt::str("case mapping of ", hex, " (vt maps ASCII, Latin-1, Latin Extended-A, basic Greek and Cyrillic)"));
}

void append_upper(std::u32string& out, char32_t c) {
  if (c == 0xDF) return out.append(U"SS"), void();
  if (c == 0x149) return out.append(U"\u02BCN"), void();
  if (c == 0x390) return out.append(U"\u0399\u0308\u0301"), void();
  if (c == 0x3B0) return out.append(U"\u03A5\u0308\u0301"), void();
  char32_t mapped;
  if (!simple_upper(c, mapped)) fail_case(c);
  out.push_back(mapped);
}

void append_title(std::u32string& out, char32_t c) {
  if (c == 0xDF) return out.append(U"Ss"), void();
  append_upper(out, c);
}

// Python applies the Final_Sigma rule: capital sigma lowers to final sigma at the end of a word.
void append_lower(std::u32string& out, const std::u32string& text, size_t i) {
  const char32_t c = text[i];
  if (c == 0x130) return out.append(U"i\u0307"), void();
  if (c == 0x3A3) {
    const bool after_cased = i > 0 && is_cased(text[i - 1]);
    const bool before_cased = i + 1 < text.size() && is_cased(text[i + 1]);
    out.push_back(after_cased && !before_cased ? 0x3C2 : 0x3C3);
    return;
  }
  char32_t mapped;
  if (!simple_lower(c, mapped)) fail_case(c);
  out.push_back(mapped);
}

}  // namespace

bool is_lower_char(char32_t c) {
  char32_t mapped;
  if (c == 0xDF || c == 0xAA || c == 0xBA || c == 0x138 || c == 0x149 || c == 0x390 || c == 0x3B0) return true;
  return simple_upper(c, mapped) && mapped != c;
}

bool is_upper_char(char32_t c) {
  char32_t mapped;
  if (c == 0x130) return true;
  return simple_lower(c, mapped) && mapped != c;
}

bool is_cased(char32_t c) { return is_lower_char(c) || is_upper_char(c); }

std::string upper(std::string_view text) {
  std::u32string out;
  for (char32_t c : decode(text)) append_upper(out, c);
  return encode(out);
}

std::string lower(std::string_view text) {
  const std::u32string points = decode(text);
  std::u32string out;
  for (size_t i = 0; i < points.size(); ++i) append_lower(out, points, i);
  return encode(out);
}

std::string title(std::string_view text) {
  const std::u32string points = decode(text);
  std::u32string out;
  bool previous_cased = false;
  for (size_t i = 0; i < points.size(); ++i) {
    const char32_t c = points[i];
    if (previous_cased) append_lower(out, points, i);
    else append_title(out, c);
    previous_cased = is_cased(c);
  }
  return encode(out);
}

std::string capitalize(std::string_view text) {
  const std::u32string points = decode(text);
  std::u32string out;
  for (size_t i = 0; i < points.size(); ++i) {
    if (i == 0) append_title(out, points[i]);
    else append_lower(out, points, i);
  }
  return encode(out);
}

std::string swapcase(std::string_view text) {
  const std::u32string points = decode(text);
  std::u32string out;
  for (size_t i = 0; i < points.size(); ++i) {
    if (is_upper_char(points[i])) append_lower(out, points, i);
    else if (is_lower_char(points[i])) append_upper(out, points[i]);
    else {
      char32_t mapped;
      if (!simple_upper(points[i], mapped)) fail_case(points[i]);
      out.push_back(points[i]);
    }
  }
  return encode(out);
}

}  // namespace vt::jinja::unicode
