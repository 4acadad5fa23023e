// The Qwen3.5 / Qwen3-Next multi-token-prediction head on the CPU reference, top to bottom:
//   x = fc([norm_e(embed(token)) | norm_h(hidden)])     hidden: an lm_head input at position p
//   x += attention(norm(x));  x += ffn(norm(x))           one decoder layer, its own KV cache
//   hidden_out = norm(x);  logits = lm_head(hidden_out)   predicts the token at p + 2
#include <cstring>
#include <utility>

#include "core/error.h"
#include "models/qwen3_5/model.h"
#include "ops/ops.h"

namespace vt {

// The MTP layer's KV cache for one sequence: rows [0, length) hold the pairs run so far.
class Qwen35Model::MtpState final : public SequenceState {
 public:
  MtpState(const Qwen35Config& config, int64_t capacity)
      : k_cache(DType::kF32, {capacity, config.num_kv_heads, config.head_dim}),
        v_cache(DType::kF32, {capacity, config.num_kv_heads, config.head_dim}),
        output(DType::kF32, {1, config.hidden_size}),
        next_output(DType::kF32, {1, config.hidden_size}) {
    capacity_ = capacity;
  }
  void set_length(int64_t length) { length_ = rollback_floor_ = length; }
  Buffer k_cache, v_cache;  // [capacity, Hkv, D]
  // The head's output (lm_head input) of the last pair run, for chaining; next_output: scratch.
  Buffer output, next_output;  // [1, H]
  bool has_output = false;
};

std::unique_ptr<SequenceState> Qwen35Model::new_mtp_sequence(int64_t capacity) const {
  VT_CHECK(has_mtp(), "MTP: ", config_.architecture, " was loaded without its MTP head (load_mtp)");
  VT_CHECK(capacity > 0 && capacity <= config_.max_position_embeddings, "MTP sequence capacity ",
           capacity, " must be in [1, ", config_.max_position_embeddings, "]");
  return std::make_unique<MtpState>(config_, capacity);
}

void Qwen35Model::mtp_rollback(SequenceState& base_state, int64_t length) const {
  MtpState& state = dynamic_cast<MtpState&>(base_state);
  VT_CHECK(length >= 0 && length <= state.length(), "MTP rollback: length ", length,
           " is outside [0, ", state.length(), "]");
  state.has_output = state.has_output && length == state.length();
  state.set_length(length);
}

void Qwen35Model::mtp_forward_from_target(std::span<const int32_t> tokens, int64_t first_position,
                                          SequenceState& state, const TensorView& logits) {
  const int64_t num_tokens = int64_t(tokens.size());
  const PositionRange kept = kept_hidden_positions();
  VT_CHECK(num_tokens > 0 && kept.contains(first_position, num_tokens),
           "MTP: the target's last forward kept the hidden states of positions [", kept.start, ", ",
           kept.end(), "), not [", first_position, ", ", first_position + num_tokens, ")");
  const int64_t row = first_position - kept.start;
  mtp_forward_pairs(tokens, last_hidden_states_.view().rows(row, row + num_tokens), state, logits);
}

void Qwen35Model::mtp_forward_pairs(std::span<const int32_t> tokens, const TensorView& hidden,
                                    SequenceState& base_state, const TensorView& logits) {
  MtpState& state = dynamic_cast<MtpState&>(base_state);
  const int64_t num_tokens = int64_t(tokens.size()), H = config_.hidden_size;
  Buffer hidden_out(DType::kF32, {num_tokens, H});
  mtp_forward(tokens, hidden, state, hidden_out, logits);
  std::memcpy(state.output.f32(), hidden_out.f32() + (num_tokens - 1) * H, H * sizeof(float));
  state.has_output = true;
}

void Qwen35Model::mtp_forward_chained(int32_t token, SequenceState& base_state,
                                      const TensorView& logits) {
  MtpState& state = dynamic_cast<MtpState&>(base_state);
  VT_CHECK(state.has_output,
           "MTP: chaining needs the output of a pair run since the last rollback");
  mtp_forward(std::span<const int32_t>(&token, 1), state.output, state, state.next_output,
              logits);
  std::swap(state.output, state.next_output);
}

void Qwen35Model::mtp_forward(std::span<const int32_t> tokens, const TensorView& hidden,
                              SequenceState& base_state, const TensorView& hidden_out,
                              const TensorView& logits) {
  VT_CHECK(has_mtp(), "MTP: ", config_.architecture, " was loaded without its MTP head (load_mtp)");
  MtpState& state = dynamic_cast<MtpState&>(base_state);
  const MtpWeights& w = *weights_.mtp;
  const int64_t num_tokens = int64_t(tokens.size()), H = config_.hidden_size;
  check_forward(state, num_tokens, logits, config_.vocab_size, /*all_logits=*/false);
  for (const TensorView* view : {&hidden, &hidden_out})
    VT_CHECK(view->dtype == DType::kF32 && view->device == Device::kCpu &&
                 view->shape == Shape({num_tokens, H}),
             "MTP: hidden states must be host f32 [", num_tokens, ", ", H, "], got ",
             view->shape.str());
  for (int32_t id : tokens)
    VT_CHECK(id >= 0 && id < config_.vocab_size, "MTP: token id ", id,
             " is outside the vocabulary [0, ", config_.vocab_size, ")");

  // fc input per row: [norm_e(embed(token)) | norm_h(hidden)], [T, 2H].
  TensorView ids{const_cast<int32_t*>(tokens.data()), DType::kI32, Device::kCpu, {num_tokens}};
  Buffer embedded(DType::kF32, {num_tokens, H}), embedded_normed(DType::kF32, {num_tokens, H});
  Buffer hidden_normed(DType::kF32, {num_tokens, H}), joined(DType::kF32, {num_tokens, 2 * H});
  ops::embedding(embedded, ids, weights_.embed_tokens);
  ops::rms_norm(embedded_normed, embedded, w.pre_fc_norm_embedding, config_.rms_norm_eps, 1.0f);
  ops::rms_norm(hidden_normed, hidden, w.pre_fc_norm_hidden, config_.rms_norm_eps, 1.0f);
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::memcpy(joined.f32() + t * 2 * H, embedded_normed.f32() + t * H, H * sizeof(float));
    std::memcpy(joined.f32() + t * 2 * H + H, hidden_normed.f32() + t * H, H * sizeof(float));
  }
  Buffer x(DType::kF32, {num_tokens, H}), normed(DType::kF32, {num_tokens, H}),
      branch(DType::kF32, {num_tokens, H});
  w.fc.forward(x, joined);
  tap("mtp_fc_out", -1, x);

  const LayerWeights& layer = w.layer;
  ops::rms_norm(normed, x, layer.input_norm, config_.rms_norm_eps, 1.0f);
  attention(branch, normed, layer.attention, state.k_cache, state.v_cache, state.length());
  tap("mtp_mixer_out", -1, branch);
  ops::add_in_place(x, branch);
  ops::rms_norm(normed, x, layer.post_attention_norm, config_.rms_norm_eps, 1.0f);
  if (layer.is_moe)
    moe(branch, normed, layer.moe);
  else
    mlp(branch, normed, layer.mlp);
  tap("mtp_ffn_out", -1, branch);
  ops::add_in_place(x, branch);

  ops::rms_norm(hidden_out, x, w.norm, config_.rms_norm_eps, 1.0f);
  tap("mtp_out", -1, hidden_out);
  weights_.lm_head.forward(logits, hidden_out.rows(num_tokens - 1, num_tokens));
  state.set_length(state.length() + num_tokens);
}

}  // namespace vt
