// Streaming detokenization; see the header for the two strategies.
#include "tokenizer/streaming_detokenizer.h"

namespace vt {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamingDetokenizer::push(int32_t id) {
  std::string out;
  if (tokenizer_.bytes_per_token()) {
    if (skip_special_tokens_ && tokenizer_.is_special(id)) return out;
    bytes_.push(tokenizer_.token_bytes(id), out);
    return out;
  }
  window_.push_back(id);
  // ByteFallback judges a run of byte tokens as a whole; ids that decode drops (skipped special
  // tokens, unknown ids) do not end a run, since they are gone before the decoder runs.
  if (tokenizer_.is_byte_token(id))
    byte_run_open_ = true;
  else if (tokenizer_.decodes_to_text(id, skip_special_tokens_))
    byte_run_open_ = false;
  if (byte_run_open_) return out;
  const std::string text = tokenizer_.decode(window_, skip_special_tokens_);
  const bool ends_replaced = text.size() >= utf8::kReplacement.size() &&
                             text.compare(text.size() - utf8::kReplacement.size(),
                                          std::string::npos, utf8::kReplacement) == 0;
  if (text.size() <= prefix_text_.size() || ends_replaced ||
      text.compare(0, prefix_text_.size(), prefix_text_) != 0)
    return out;
  out = text.substr(prefix_text_.size());
  // The ids just emitted become the context of the next window.
  window_.erase(window_.begin(), window_.begin() + std::ptrdiff_t(read_));
  read_ = window_.size();
  prefix_text_ = tokenizer_.decode(window_, skip_special_tokens_);
  return out;
}

std::string StreamingDetokenizer::finish() {
  std::string out;
  if (tokenizer_.bytes_per_token()) {
    bytes_.finish(out);
    return out;
  }
  const std::string text = tokenizer_.decode(window_, skip_special_tokens_);
  if (text.size() > prefix_text_.size() && text.compare(0, prefix_text_.size(), prefix_text_) == 0)
    out = text.substr(prefix_text_.size());
  window_.clear();
  byte_run_open_ = false;
  read_ = 0;
  prefix_text_.clear();
  return out;
}

}  // namespace vt
