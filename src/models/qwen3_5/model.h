// Qwen3.5 / Qwen3.6 / Qwen3-Next: hybrid Gated DeltaNet + gated attention, dense or MoE FFN.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/linear.h"
#include "model/model.h"
#include "model/mtp_head.h"
#include "models/qwen3_5/config.h"

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

// The multi-token-prediction head (checkpoint `mtp.*`): for the target's lm_head input h at
// position p and the token x at p + 1, out = norm(layer(fc([norm_e(embed(x)) | norm_h(h)]))) is
// its own lm_head input, predicting the token at p + 2. Embeddings and lm_head are the model's.
struct MtpWeights {
  Buffer pre_fc_norm_embedding, pre_fc_norm_hidden;  // [H], zero-centred
  Linear fc;                                         // [H, 2H]: input [embedding | hidden]
  LayerWeights layer;                                // one full-attention decoder layer
  Buffer norm;                                       // [H], zero-centred
};

struct Qwen35Weights {
  TensorView embed_tokens;  // [V, H], in the checkpoint's dtype (mmap'd)
  std::vector<LayerWeights> layers;
  Buffer final_norm;  // [H]
  Linear lm_head;     // [V, H]
  std::optional<MtpWeights> mtp;  // loaded with Qwen35LoadOptions::load_mtp
};

// Tensor parallelism: sums one rank's partial [T, H] across the ranks, in place. A rank's model
// calls it on the output of each row-parallel projection (the mixer's out_proj / o_proj, the FFN's
// down or MoE combine) before the residual add (parallel/tensor_parallel_plan.h).
using AllReduceHook = std::function<void(const TensorView& partial)>;

struct Qwen35LoadOptions {
  Fp8Activations fp8_activations = Fp8Activations::kQuantized;
  // Load the `mtp.*` head (required then; every tensor of it consumed). Off: declared ignored.
  bool load_mtp = false;
};

// Reads every weight through the store (checking shapes and dtypes) and calls finish().
Qwen35Weights load_qwen35_weights(WeightStore& store, const Qwen35Config& config,
                                  const Qwen35LoadOptions& options);

class Qwen35Model final : public Model, public MtpHead {
 public:
  Qwen35Model(const std::string& dir, const Qwen35LoadOptions& options);
  // One rank of a tensor-parallel world: `rank_config` holds the rank's head counts and widths and
  // `weights` its slices (TensorParallelPlan); the embeddings view must outlive the model.
  Qwen35Model(Qwen35Config rank_config, Qwen35Weights weights, AllReduceHook all_reduce);

  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_sequence(int64_t capacity) const override;
  void forward(std::span<const int32_t> tokens, SequenceState& state, const TensorView& logits,
               const ForwardOptions& options) override;
  std::string describe() const override;
  void quantize_lm_head_fp8(const Fp8Quantization& quantization = {}) override {
    VT_CHECK(weights_.lm_head.format() == WeightFormat::kDense, "the LM head is already FP8");
    weights_.lm_head = weights_.lm_head.to_fp8_blocks(quantization);
  }
  bool supports_rollback() const override { return true; }
  void rollback(SequenceState& state, int64_t length) override;
  void commit(SequenceState& state) override;
  bool supports_prefix_cache() const override { return true; }
  std::unique_ptr<StateSnapshot> save_state(const SequenceState& state) override;
  void restore_state(const StateSnapshot& snapshot, SequenceState& state) override;
  const Qwen35Config& config() const { return config_; }

  // For the MTP drafter: keep the lm_head input (after the final norm) of every position each
  // forward runs. Off by default (it norms all T rows, not only the logits' rows).
  void set_keep_hidden_states(bool keep) override { keep_hidden_states_ = keep; }
  // The kept rows of the last forward, [T, H] f32 (empty before one), and the first one's position.
  TensorView last_hidden_states() const { return last_hidden_states_.view(); }
  int64_t last_hidden_states_start() const { return last_hidden_states_start_; }
  PositionRange kept_hidden_positions() const override {
    const int64_t rows = last_hidden_states_.empty() ? 0 : last_hidden_states_.shape()[0];
    return {last_hidden_states_start_, rows};
  }

  // The MTP head (mtp.cpp). Its sequence is the KV cache of its attention layer: position
  // p holds the pair (hidden at p, token at p + 1), rotated at position p as vLLM does.
  bool has_mtp() const override { return weights_.mtp.has_value(); }
  std::unique_ptr<SequenceState> new_mtp_sequence(int64_t capacity) const override;
  // Runs T pairs after what `state` holds: tokens [T], hidden [T, H] (lm_head inputs, the target's
  // or the head's own when chaining); writes hidden_out [T, H] (its lm_head inputs) and logits
  // [1, vocab] of the last pair.
  void mtp_forward(std::span<const int32_t> tokens, const TensorView& hidden, SequenceState& state,
                   const TensorView& hidden_out, const TensorView& logits);
  // mtp_forward of pairs from the target's hidden rows [T, H], the last output kept for chaining.
  void mtp_forward_pairs(std::span<const int32_t> tokens, const TensorView& hidden,
                         SequenceState& state, const TensorView& logits);
  // Drops the pairs after the first `length` (a KV cache only shortens).
  void mtp_rollback(SequenceState& state, int64_t length) const override;
  // MtpHead (model/mtp_head.h) over mtp_forward: hidden rows from last_hidden_states(), the last
  // pair's output kept in the state for chaining.
  void mtp_forward_from_target(std::span<const int32_t> tokens, int64_t first_position,
                               SequenceState& state, const TensorView& logits) override;
  void mtp_forward_chained(int32_t token, SequenceState& state,
                           const TensorView& logits) override;
  // Hidden states kept in the target sequence (ForwardOptions / BatchItem keep_hidden).
  bool keeps_sequence_hidden_states() const override { return true; }
  PositionRange sequence_hidden_positions(const SequenceState& target) const override;
  void mtp_forward_from_sequence(std::span<const int32_t> tokens, int64_t first_position,
                                 SequenceState& target, SequenceState& state,
                                 const TensorView& logits) override;

 private:
  class State;
  class MtpState;
  void gated_delta_net(const TensorView& out, const TensorView& x, int layer, State& state,
                       DeltaRuleChoice choice);
  // The GDN core after the projections: mixed [T, conv_dim] and b|a [T, 2*Hv] -> core [T, Hv, dv],
  // advancing the conv and recurrent states. Rollback replays it from the window's checkpoint.
  void gdn_core(const TensorView& core, const TensorView& mixed, const TensorView& ba, int layer,
                const TensorView& conv_state, const TensorView& recurrent_state, bool recurrent);
  // Gated attention of `weights` over k/v caches [capacity, Hkv, D] holding `start` tokens.
  void attention(const TensorView& out, const TensorView& x, const AttentionWeights& weights,
                 const TensorView& k_cache, const TensorView& v_cache, int64_t start);
  void mlp(const TensorView& out, const TensorView& x, const MlpWeights& weights);
  void moe(const TensorView& out, const TensorView& x, const MoeWeights& weights);

  Qwen35Config config_;
  WeightStore store_;  // keeps the checkpoint mapped (embeddings are read in place)
  Qwen35Weights weights_;
  ModelInfo info_;
  AllReduceHook all_reduce_;  // empty on a single rank
  bool keep_hidden_states_ = false;
  Buffer last_hidden_states_;  // [T, H] of the last forward when keeping
  int64_t last_hidden_states_start_ = 0;
};

}  // namespace vt
