// UTF-8 helpers for the tokenizer: decoding one code point, the U+FFFD replacement of invalid
// input (one per maximal invalid subpart, as Python's bytes.decode(errors="replace") and Rust's
// String::from_utf8_lossy do), and an incremental decoder that never emits a partial sequence.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace vt::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid sequence starting at data[0] (1-4), or 0 when it is not valid UTF-8
// (the sequence is then skipped by maximal_invalid_length()). Sets *code_point when valid.
int decode(const unsigned char* data, size_t size, uint32_t* code_point);

// Bytes that form one maximal invalid subpart at data[0] (>= 1): a prefix of a valid sequence
// that was cut short, or a single byte that can start none.
size_t maximal_invalid_length(const unsigned char* data, size_t size);

bool is_valid(std::string_view text);

// text with each maximal invalid subpart replaced by U+FFFD.
std::string replace_invalid(std::string_view text);

void append(std::string& out, uint32_t code_point);

// Feeds bytes in any split and gets back only whole characters; the concatenated output of all
// push() calls plus finish() equals replace_invalid(all bytes).
class IncrementalDecoder {
 public:
  void push(std::string_view bytes, std::string& out);
  void finish(std::string& out);  // a cut-short sequence at the end becomes U+FFFD
  bool pending() const { return pending_size_ > 0; }

 private:
  void push_byte(unsigned char byte, std::string& out);
  unsigned char pending_[4] = {};
  int pending_size_ = 0;
  int expected_size_ = 0;
};

}  // namespace vt::utf8
