// Decoders of tokenizer.json ("decoder"): ByteLevel, ByteFallback, Fuse, Replace, Strip and
// Sequence, each with HF's decode_chain semantics (what the Qwen, Llama and SmolLM files use).
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace vt {

class Decoder {
 public:
  // json null: no decoder (HF then joins the tokens with spaces).
  static Decoder from_json(const nlohmann::json& json, const std::string& where);

  std::string decode(std::vector<std::string> tokens) const;

  // Whether decode(tokens) is "concatenate a byte string per token, then replace invalid UTF-8"
  // for a vocabulary whose every token passes token_bytes(): true for ByteLevel chains.
  bool bytes_per_token() const;
  // The bytes a token contributes under bytes_per_token(); false when this token breaks that
  // shape (a <0xNN> byte token, a Replace pattern inside it, or a character outside the byte
  // alphabet once Fuse has joined the tokens).
  bool token_bytes(std::string_view token, std::string& bytes) const;
  // A <0xNN> token that ByteFallback turns into a byte: the stream must wait for the run to end.
  bool is_byte_token(std::string_view token) const;

 private:
  enum class Kind { kByteLevel, kByteFallback, kFuse, kReplace, kStrip };
  struct Step {
    Kind kind;
    std::shared_ptr<Regex> pattern;  // kReplace
    std::string content;             // kReplace: replacement; kStrip: the character stripped
    size_t start = 0, stop = 0;      // kStrip
  };
  static void add_steps(const nlohmann::json& json, const std::string& where, int depth,
                        std::vector<Step>& steps);
  std::vector<Step> steps_;
  bool present_ = false;
};

}  // namespace vt
