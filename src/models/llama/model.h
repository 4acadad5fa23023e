// Llama-family decoder (SmolLM2, Llama 2/3 without rope scaling) from a GGUF file: RMSNorm,
// full RoPE, GQA attention, SwiGLU MLP, tied or untied embeddings. Shares ops with Qwen3.5.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "model/linear.h"
#include "model/model.h"

namespace vt {

struct LlamaConfig {
  std::string architecture = "llama";
  std::string name;  // general.name, for messages
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0, intermediate_size = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t max_position_embeddings = 0;
  float rope_theta = 10000.0f;
  float rms_norm_eps = 1e-5f;
  bool tie_word_embeddings = true;  // no output.weight: the LM head is the embedding table
};

// Reads llama.* metadata (and the embedding's shape for the vocabulary) and validates it.
LlamaConfig parse_llama_config(const GgufFile& file);

// llama.cpp's converter stores q and k rows of each head interleaved ([x0, x_half, x1, ...]) for
// its "normal" (GPT-J style) RoPE; this puts them back in HF order ([x0 .. x_half-1 | x_half ..])
// so RoPE runs as NeoX halves (ops::rope_neox), as in HF transformers. weight [heads*D, K].
Buffer unpermute_rope_rows(const Buffer& weight, int64_t heads);

struct LlamaLayerWeights {
  Buffer attention_norm;  // [H]
  Linear qkv;             // [Hq*D + 2*Hkv*D, H]: q | k | v, q and k rows in HF (NeoX) order
  Linear o_proj;          // [H, Hq*D]
  Buffer ffn_norm;        // [H]
  Linear gate_up;         // [2I, H]: gate | up
  Linear down;            // [H, I]
};

struct LlamaWeights {
  std::vector<LlamaLayerWeights> layers;
  Buffer final_norm;        // [H]
  Linear lm_head;           // [V, H]
  TensorView embed_tokens;  // [V, H] f32: lm_head's matrix when tied, else embedding_table
  Buffer embedding_table;   // [V, H], only when untied
};

class LlamaModel final : public Model {
 public:
  explicit LlamaModel(const std::string& gguf_path, const LoadProgress& progress = {});

  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_sequence(int64_t capacity) const override;
  void forward(std::span<const int32_t> tokens, SequenceState& state, const TensorView& logits,
               const ForwardOptions& options) override;
  std::string describe() const override;
  // Pure KV cache: any shorter length is a valid state (the floor stays 0), nothing to keep.
  bool supports_rollback() const override { return true; }
  void rollback(SequenceState& state, int64_t length) override;
  void commit(SequenceState&) override {}
  bool supports_prefix_cache() const override { return true; }
  std::unique_ptr<StateSnapshot> save_state(const SequenceState& state) override;
  void restore_state(const StateSnapshot& snapshot, SequenceState& state) override;
  void quantize_lm_head_fp8(const Fp8Quantization& quantization = {}) override;
  const LlamaConfig& config() const { return config_; }
  const GgufFile& file() const { return file_; }

 private:
  class State;
  void attention(const TensorView& out, const TensorView& x, int layer, State& state);
  void mlp(const TensorView& out, const TensorView& x, const LlamaLayerWeights& weights);

  GgufFile file_;
  LlamaConfig config_;
  LlamaWeights weights_;
  ModelInfo info_;
};

}  // namespace vt
