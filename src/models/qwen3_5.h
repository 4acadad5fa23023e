// Qwen3.5 / Qwen3.6 / Qwen3-Next: hybrid Gated DeltaNet + gated attention, dense or MoE FFN.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/linear.h"
#include "model/model.h"
#include "models/qwen3_5_config.h"

namespace vt {

struct GatedDeltaNetWeights {
  Linear in_proj;      // [conv_dim + Hv*dv, H]: q_all | k_all | v_all | z_all (merged qkv + z)
  Linear in_proj_ba;   // [2*Hv, H]: b | a
  Buffer conv_weight;  // [conv_dim, K]
  Buffer a_log;        // [Hv]
  Buffer dt_bias;      // [Hv]
  Buffer norm;         // [dv], plain weight (not zero-centred)
  Linear out_proj;     // [H, Hv*dv]
};

struct AttentionWeights {
  Linear qkv;     // [Hq*2D + 2*Hkv*D, H]: per head [q | gate], then k, then v
  Buffer q_norm;  // [D], zero-centred
  Buffer k_norm;  // [D], zero-centred
  Linear o_proj;  // [H, Hq*D]
};

struct MlpWeights {
  Linear gate_up;  // [2I, H]: gate | up
  Linear down;     // [H, I]
};

struct MoeWeights {
  Linear router;                    // [E, H]
  std::vector<MlpWeights> experts;  // E
  MlpWeights shared_expert;
  Linear shared_expert_gate;        // [1, H]
};

struct LayerWeights {
  LayerKind kind;
  Buffer input_norm, post_attention_norm;  // [H], zero-centred
  GatedDeltaNetWeights gdn;                // when kind == kLinearAttention
  AttentionWeights attention;              // when kind == kFullAttention
  bool is_moe = false;
  MlpWeights mlp;  // dense FFN
  MoeWeights moe;  // MoE FFN
};

struct Qwen35Weights {
  TensorView embed_tokens;  // [V, H], in the checkpoint's dtype (mmap'd)
  std::vector<LayerWeights> layers;
  Buffer final_norm;  // [H]
  Linear lm_head;     // [V, H]
};

struct Qwen35LoadOptions {
  Fp8Activations fp8_activations = Fp8Activations::kQuantized;
};

// Reads every weight through the store (checking shapes and dtypes) and calls finish().
Qwen35Weights load_qwen35_weights(WeightStore& store, const Qwen35Config& config,
                                  const Qwen35LoadOptions& options);

class Qwen35Model final : public Model {
 public:
  Qwen35Model(const std::string& dir, const Qwen35LoadOptions& options);

  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_sequence(int64_t capacity) const override;
  void forward(std::span<const int32_t> tokens, SequenceState& state, const TensorView& logits,
               const ForwardOptions& options) override;
  std::string describe() const override;
  const Qwen35Config& config() const { return config_; }

 private:
  class State;
  void gated_delta_net(const TensorView& out, const TensorView& x, int layer, State& state,
                       DeltaRuleChoice choice);
  void attention(const TensorView& out, const TensorView& x, int layer, State& state);
  void mlp(const TensorView& out, const TensorView& x, const MlpWeights& weights);
  void moe(const TensorView& out, const TensorView& x, const MoeWeights& weights);

  Qwen35Config config_;
  WeightStore store_;  // keeps the checkpoint mapped (embeddings are read in place)
  Qwen35Weights weights_;
  ModelInfo info_;
};

}  // namespace vt
