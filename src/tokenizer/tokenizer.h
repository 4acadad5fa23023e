// vt::Tokenizer: HF `tokenizers`-compatible byte-level BPE loaded from tokenizer.json (plus the
// token settings and chat template of tokenizer_config.json). encode/decode give HF's ids and
// text exactly; see docs/tokenizer.md for what is supported and how raw invalid UTF-8 is handled.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace vt {

// The parts of tokenizer_config.json (and chat_template.jinja) the engine needs; empty when absent.
struct TokenizerConfig {
  std::string bos_token, eos_token, pad_token, unk_token;
  std::string chat_template;  // chat_template.jinja if present, else the config's (its "default")
  bool add_bos_token = false, add_eos_token = false;
};

struct EncodeOptions {
  bool add_special_tokens = true;  // apply the post-processor template (HF's default)
  bool split_special_tokens =
      false;  // match special tokens as plain text (HF's encode_special_tokens)
};

class Tokenizer {
 public:
  // path: a folder holding tokenizer.json (and optionally tokenizer_config.json,
  // chat_template.jinja), or a tokenizer.json file. Throws vt::Error naming the file and field.
  static std::unique_ptr<Tokenizer> load(const std::string& path);
  // From tokenizer.json text; `name` is used in error messages.
  static std::unique_ptr<Tokenizer> from_json_text(std::string_view json_text,
                                                   const std::string& name);

  // Any bytes: invalid UTF-8 is first replaced by U+FFFD per maximal invalid subpart (what
  // Python's bytes.decode("utf-8", errors="replace") gives), then encoded as HF encodes that text.
  // Thread-safe.
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Text of the ids, as HF's Tokenizer.decode (always valid UTF-8). Throws on an unknown id.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  int32_t vocab_size() const {
    return vocab_size_;
  }  // one past the largest id, added tokens included
  int32_t token_to_id(std::string_view token) const;  // -1 when unknown
  std::string id_to_token(int32_t id) const;          // throws on an unknown id
  bool is_special(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const { return added_.tokens(); }
  const TokenizerConfig& config() const { return config_; }

  // For StreamingDetokenizer: whether decode() is the U+FFFD-replaced concatenation of
  // token_bytes(id), and the pieces themselves.
  bool bytes_per_token() const { return bytes_per_token_; }
  std::string_view token_bytes(int32_t id) const;
  bool is_byte_token(int32_t id) const;                              // a <0xNN> ByteFallback token
  bool decodes_to_text(int32_t id, bool skip_special_tokens) const;  // false: decode() drops it

 private:
  Tokenizer() = default;
  void encode_text(std::string_view text, std::vector<int32_t>& ids, BpeCache* cache) const;
  void encode_pieces(std::string_view text, std::vector<int32_t>& ids, BpeCache* cache) const;
  const std::string& token_text(int32_t id) const;  // vocabulary string or added content
  void prepare_decoding();

  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  BpeModel model_;
  AddedVocabulary added_;
  Decoder decoder_;
  std::vector<std::vector<int32_t>> template_single_;  // post-processor: ids per item, empty = $A
  std::vector<bool> template_is_sequence_;
  int32_t vocab_size_ = 0;
  bool bytes_per_token_ = false;
  std::vector<uint8_t> id_flags_;  // per id: kKnown, kSpecial
  std::vector<uint32_t>
      byte_offsets_;  // token_bytes(id) = byte_arena_[offsets[id], offsets[id + 1])
  std::string byte_arena_;
  TokenizerConfig config_;
  mutable std::mutex cache_mutex_;
  mutable BpeCache cache_;
};

}  // namespace vt
