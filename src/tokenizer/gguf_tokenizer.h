// The tokenizer and chat template a GGUF file carries in its metadata (tokenizer.ggml.*,
// tokenizer.chat_template), turned into vt's Tokenizer and Jinja template set. Byte-level BPE
// ("gpt2" vocabularies: SmolLM2, Llama 3, Qwen) is converted as transformers' GGUF loader does.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "io/gguf.h"
#include "jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace vt {

// The tokenizer.json equivalent of the metadata (transformers' GGUFLlamaConverter for a "gpt2"
// vocabulary): BPE over vocab and merges, control tokens (token_type 3) as special added tokens,
// user-defined ones (4) as plain added tokens, ByteLevel pre-tokenizer and decoder.
nlohmann::json gguf_tokenizer_json(const GgufFile& file);
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const GgufFile& file);

// Special token ids from the metadata; -1 where the file names none.
struct GgufSpecialTokens {
  int32_t bos = -1, eos = -1, eot = -1, unknown = -1, padding = -1;
  bool add_bos = false;
  std::vector<int32_t> stop_ids() const;  // eos and eot, as present
};
GgufSpecialTokens gguf_special_tokens(const GgufFile& file);

// tokenizer.chat_template as the "default" template, with bos/eos/unk/pad token texts as HF
// passes them to apply_chat_template. Throws when the file has no chat template.
jinja::ChatTemplateSet gguf_chat_templates(const GgufFile& file);

}  // namespace vt
