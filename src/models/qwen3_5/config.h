// The Qwen3.5 / Qwen3.6 / Qwen3-Next text config, parsed from an HF config.json and checked.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/json_config.h"
#include "model/model.h"
#include "ops/attention/rope.h"

namespace vt {

enum class LayerKind { kLinearAttention, kFullAttention };

enum class Qwen35Variant {
  kQwen35,     // Qwen3_5ForCausalLM / Qwen3_5ForConditionalGeneration (dense)
  kQwen35Moe,  // Qwen3_5MoeForCausalLM / Qwen3_5MoeForConditionalGeneration
  kQwen3Next,  // Qwen3NextForCausalLM (interleaved in_proj_qkvz / in_proj_ba)
};

struct Fp8BlockConfig {
  int64_t block_n = 128, block_k = 128;
  std::vector<std::string> modules_to_not_convert;
};

struct Qwen35Config {
  std::string architecture;
  Qwen35Variant variant = Qwen35Variant::kQwen35;
  std::string weight_prefix;  // "model." or "model.language_model." (VL layout)
  bool has_vision_tower = false;

  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0;
  std::vector<LayerKind> layer_types;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 0;

  // Gated attention.
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0, rotary_dim = 0;
  Rope rope;  // theta and, from rope_parameters, YaRN

  // Gated DeltaNet.
  int64_t linear_num_key_heads = 0, linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0, linear_value_head_dim = 0, linear_conv_kernel = 4;

  // Dense MLP.
  int64_t intermediate_size = 0;

  // MoE (num_experts == 0 for dense models).
  int64_t num_experts = 0, num_experts_per_tok = 0, moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0, decoder_sparse_step = 1;
  bool norm_topk_prob = true;
  std::vector<int64_t> mlp_only_layers;

  int64_t mtp_num_layers = 0;
  std::optional<Fp8BlockConfig> fp8;

  int64_t conv_dim() const {
    return 2 * linear_num_key_heads * linear_key_head_dim + linear_value_head_dim * linear_num_value_heads;
  }
  int64_t linear_value_dim() const { return linear_num_value_heads * linear_value_head_dim; }
  bool layer_is_moe(int64_t layer) const;
  // Weights a token multiplies through in the layers (projections, the delta rule's state, the
  // MLP or the router and its active experts), for ModelInfo.
  int64_t layer_weights_per_token() const;
  int64_t full_attention_layers() const;
  // What the engine reads of the model (positions: max_position_embeddings).
  ModelInfo model_info() const;
};

// Parses config.json at `path`; throws naming the file and key on anything missing or invalid.
Qwen35Config parse_qwen35_config(const std::string& path);

// True when `architecture` (config.json "architectures"[0]) is one this config parser handles.
bool is_qwen35_architecture(const std::string& architecture);

}  // namespace vt
