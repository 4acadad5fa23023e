// GPT-2's byte-level alphabet: each byte is shown as one printable character (space is 'Ġ',
// newline 'Ċ'), so byte-level vocabularies are written as text in tokenizer.json.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace vt::byte_level {

// Code point that stands for `byte`.
inline uint32_t char_of(uint8_t byte) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> chars{};
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      chars[size_t(b)] = printable ? uint32_t(b) : next++;
    }
    return chars;
  }();
  return table[byte];
}

// Byte a code point stands for, or -1 when it is not in the alphabet.
inline int byte_of(uint32_t code_point) {
  static const std::array<int16_t, 324> table = [] {
    std::array<int16_t, 324> bytes{};
    bytes.fill(-1);
    for (int b = 0; b < 256; ++b) bytes[char_of(uint8_t(b))] = int16_t(b);
    return bytes;
  }();
  return code_point < table.size() ? table[code_point] : -1;
}

// Raw bytes of an alphabet string; false when some character is outside the alphabet.
bool to_bytes(std::string_view text, std::string& bytes);

}  // namespace vt::byte_level
