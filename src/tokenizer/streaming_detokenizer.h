// Turns generated ids into text as they arrive. Never emits part of a UTF-8 sequence, and the
// concatenation of everything push() and finish() return equals tokenizer.decode(all ids).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace vt {

class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  std::string push(int32_t id);  // the text this id completes (often empty mid-character)
  std::string finish();          // the rest (a cut-off character becomes U+FFFD); then reusable

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  // Byte-level tokenizers: each id is a byte string; an incremental UTF-8 decoder does the rest.
  utf8::IncrementalDecoder bytes_;
  // Other decoders: re-decode a short window of ids and emit what it adds past its first part
  // (as HF's DecodeStream), holding back while the text ends in U+FFFD or a byte run is open.
  std::vector<int32_t> window_;
  bool byte_run_open_ = false;
  size_t read_ = 0;          // window_[0, read_) has been emitted; it is context for the rest
  std::string prefix_text_;  // decode(window_[0, read_))
};

}  // namespace vt
