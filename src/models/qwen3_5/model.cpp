// Qwen3.5 forward, top to bottom like the architecture diagram:
//   x = embed(tokens)
//   for each layer:  x += mixer(norm(x))   (Gated DeltaNet, or gated attention every 4th layer)
//                    x += ffn(norm(x))     (SwiGLU MLP, or MoE with a gated shared expert)
//   logits = lm_head(norm(x))
#include "models/qwen3_5/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "model/host_snapshot.h"
#include "ops/ops.h"

namespace vt {

// KV cache per attention layer and conv + recurrent state per GDN layer, for one sequence.
//
// Rollback (speculative verification) is a checkpoint plus replay. When a window opens, each GDN
// layer copies its conv and recurrent state aside; every token run inside the window appends its
// GDN-core inputs (the projected conv input and b|a, conv_dim + 2*Hv floats) to a log. Rolling
// back to a prefix restores the checkpoint and replays the core (conv, norms, delta rule; no
// GEMMs) over the kept tokens; attention layers only shorten the KV length. Chosen over keeping
// the state after each of the k+1 positions because that costs (k+1) state copies of memory and
// write traffic on every verify step (27B: 144 MiB per copy, 1.3 GiB at k = 8), while this costs
// one copy when the window opens and a replay only when a draft is rejected; the replay reads
// the checkpoint once, as a decode step reads the state. Replaying with the token-by-token rule
// gives bit for bit the state of the verify forward when it ran the token-by-token rule too.
class Qwen35Model::State final : public SequenceState {
 public:
  State(const Qwen35Config& config, int64_t capacity) {
    capacity_ = capacity;
    for (LayerKind kind : config.layer_types) {
      Slot slot;
      if (kind == LayerKind::kFullAttention) {
        slot.k_cache = Buffer(DType::kF32, {capacity, config.num_kv_heads, config.head_dim});
        slot.v_cache = Buffer(DType::kF32, {capacity, config.num_kv_heads, config.head_dim});
      } else {
        slot.conv = Buffer(DType::kF32, {config.conv_dim(), config.linear_conv_kernel - 1});
        slot.recurrent = Buffer(DType::kF32, {config.linear_num_value_heads, config.linear_key_head_dim,
                                              config.linear_value_head_dim});
      }
      slots.push_back(std::move(slot));
    }
  }
  struct Slot {
    Buffer k_cache, v_cache;  // [capacity, Hkv, D]
    Buffer conv;              // [conv_dim, K-1]
    Buffer recurrent;         // [Hv, dk, dv] fp32
    // Rollback window (GDN layers): the states where it opened, and per token since then the
    // core's inputs, [tokens, conv_dim] and [tokens, 2*Hv] row-major.
    Buffer checkpoint_conv, checkpoint_recurrent;
    std::vector<float> replay_mixed, replay_ba;
  };
  std::vector<Slot> slots;
  bool window_open = false;
  // Hidden states kept by forwards with keep_hidden (MtpHead): rows [kept_count, H] of positions
  // from kept_start; the storage only grows, so steady decoding allocates nothing here.
  std::vector<float> kept_hidden;
  int64_t kept_start = 0, kept_count = 0;
  // Room for `tokens` rows of a forward from start(): drops the kept rows from there on (rolled
  // back), or all of them when they do not reach it; returns the first new row.
  int64_t keep_rows(int64_t tokens, int64_t hidden) {
    kept_count = std::clamp<int64_t>(start() - kept_start, 0, kept_count);
    if (kept_start + kept_count != start()) kept_start = start(), kept_count = 0;
    const size_t size = size_t((kept_count + tokens) * hidden);
    if (kept_hidden.size() < size) kept_hidden.resize(size);
    kept_count += tokens;
    return kept_count - tokens;
  }
  int64_t start() const { return length_; }
  void advance(int64_t tokens) {
    length_ += tokens;
    if (!window_open) rollback_floor_ = length_;
  }
  void open_window() {
    for (Slot& slot : slots) {
      if (slot.conv.empty()) continue;
      if (slot.checkpoint_conv.empty()) {
        slot.checkpoint_conv = Buffer(DType::kF32, slot.conv.shape());
        slot.checkpoint_recurrent = Buffer(DType::kF32, slot.recurrent.shape());
      }
      std::memcpy(slot.checkpoint_conv.f32(), slot.conv.f32(), slot.conv.view().bytes());
      std::memcpy(slot.checkpoint_recurrent.f32(), slot.recurrent.f32(), slot.recurrent.view().bytes());
      slot.replay_mixed.clear();
      slot.replay_ba.clear();
    }
    window_open = true;
    rollback_floor_ = length_;
  }
  void close_window() {
    for (Slot& slot : slots) slot.replay_mixed.clear(), slot.replay_ba.clear();
    window_open = false;
    rollback_floor_ = length_;
  }
  void set_length(int64_t length) { length_ = length; }
};

namespace {

// Copies columns [begin, begin + dst cols) of src [T, N] into dst [T, n].
void copy_columns(const TensorView& dst, const TensorView& src, int64_t begin) {
  const int64_t rows = src.dim(0), n = src.dim(1), width = dst.numel() / rows;
  VT_CHECK(begin + width <= n, "copy_columns: [", begin, ", ", begin + width, ") outside ", n);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst.f32() + r * width, src.f32() + r * n + begin, width * sizeof(float));
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus (beta 1, threshold 20).
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace

Qwen35Model::Qwen35Model(const std::string& dir, const Qwen35LoadOptions& options)
    : config_(parse_qwen35_config(dir + "/config.json")), store_(WeightStore::open(dir)) {
  weights_ = load_qwen35_weights(store_, config_, options);
  info_ = config_.model_info();
}

Qwen35Model::Qwen35Model(Qwen35Config rank_config, Qwen35Weights weights, AllReduceHook all_reduce)
    : config_(std::move(rank_config)), weights_(std::move(weights)), all_reduce_(std::move(all_reduce)) {
  info_ = config_.model_info();
}

std::unique_ptr<SequenceState> Qwen35Model::new_sequence(int64_t capacity) const {
  VT_CHECK(capacity > 0 && capacity <= config_.max_position_embeddings, "sequence capacity ", capacity,
           " must be in [1, ", config_.max_position_embeddings, "]");
  return std::make_unique<State>(config_, capacity);
}

void Qwen35Model::forward(std::span<const int32_t> tokens, SequenceState& base_state,
                          const TensorView& logits, const ForwardOptions& options) {
  State& state = dynamic_cast<State&>(base_state);
  const int64_t num_tokens = int64_t(tokens.size()), hidden = config_.hidden_size;
  const int64_t logit_rows = check_forward(state, num_tokens, logits, config_.vocab_size, options.all_logits);
  if (options.keep_rollback && !state.window_open) state.open_window();
  if (!options.keep_rollback && state.window_open) state.close_window();

  TensorView ids{const_cast<int32_t*>(tokens.data()), DType::kI32, Device::kCpu, {num_tokens}};
  Buffer x(DType::kF32, {num_tokens, hidden}), normed(DType::kF32, {num_tokens, hidden});
  Buffer branch(DType::kF32, {num_tokens, hidden});
  ops::embedding(x, ids, weights_.embed_tokens);
  tap("embed", -1, x);

  for (int layer = 0; layer < int(config_.num_layers); ++layer) {
    const LayerWeights& w = weights_.layers[layer];
    ops::rms_norm(normed, x, w.input_norm, config_.rms_norm_eps, 1.0f);
    if (w.kind == LayerKind::kLinearAttention)
      gated_delta_net(branch, normed, layer, state, options.delta_rule);
    else
      attention(branch, normed, w.attention, state.slots[layer].k_cache, state.slots[layer].v_cache, state.start());
    if (all_reduce_) all_reduce_(branch);
    tap("mixer_out", layer, branch);
    ops::add_in_place(x, branch);

    ops::rms_norm(normed, x, w.post_attention_norm, config_.rms_norm_eps, 1.0f);
    if (w.is_moe) moe(branch, normed, w.moe);
    else mlp(branch, normed, w.mlp);
    if (all_reduce_) all_reduce_(branch);
    tap("ffn_out", layer, branch);
    ops::add_in_place(x, branch);
    tap("layer_out", layer, x);
  }

  if (options.keep_hidden) {
    // This sequence's lm_head inputs, for the MTP drafter in a batch; the logits read from them.
    const int64_t first = state.keep_rows(num_tokens, hidden);
    TensorView kept{state.kept_hidden.data() + first * hidden, DType::kF32, Device::kCpu, {num_tokens, hidden}};
    ops::rms_norm(kept, x, weights_.final_norm, config_.rms_norm_eps, 1.0f);
    weights_.lm_head.forward(logits, kept.rows(num_tokens - logit_rows, num_tokens));
  } else if (keep_hidden_states_) {
    // Every position's lm_head input, for the MTP drafter; the logits read their rows from it.
    last_hidden_states_ = Buffer(DType::kF32, {num_tokens, hidden});
    last_hidden_states_start_ = state.start();
    ops::rms_norm(last_hidden_states_, x, weights_.final_norm, config_.rms_norm_eps, 1.0f);
    weights_.lm_head.forward(logits, last_hidden_states_.view().rows(num_tokens - logit_rows, num_tokens));
  } else {
    TensorView last = x.view().rows(num_tokens - logit_rows, num_tokens);
    Buffer final_normed(DType::kF32, {logit_rows, hidden});
    ops::rms_norm(final_normed, last, weights_.final_norm, config_.rms_norm_eps, 1.0f);
    weights_.lm_head.forward(logits, final_normed);
  }
  state.advance(num_tokens);
}

// The MTP head's reads of a target sequence's kept hidden states (the head itself: mtp.cpp).
PositionRange Qwen35Model::sequence_hidden_positions(const SequenceState& base_target) const {
  const State& target = dynamic_cast<const State&>(base_target);
  return {target.kept_start,
          std::clamp<int64_t>(target.length() - target.kept_start, 0, target.kept_count)};
}

void Qwen35Model::mtp_forward_from_sequence(std::span<const int32_t> tokens, int64_t first_position,
                                            SequenceState& base_target, SequenceState& state,
                                            const TensorView& logits) {
  State& target = dynamic_cast<State&>(base_target);
  const int64_t num_tokens = int64_t(tokens.size()), H = config_.hidden_size;
  const PositionRange kept = sequence_hidden_positions(target);
  VT_CHECK(num_tokens > 0 && kept.contains(first_position, num_tokens),
           "MTP: the target sequence keeps the hidden states of positions [", kept.start, ", ",
           kept.end(), "), not [", first_position, ", ", first_position + num_tokens, ")");
  const int64_t row = first_position - kept.start;
  const TensorView hidden{target.kept_hidden.data() + row * H, DType::kF32, Device::kCpu,
                          {num_tokens, H}};
  mtp_forward_pairs(tokens, hidden, state, logits);
  // The next pairs start after these: the rows before them go (a few rows move to the front).
  const int64_t drop = row + num_tokens;
  std::memmove(target.kept_hidden.data(), target.kept_hidden.data() + drop * H,
               size_t((target.kept_count - drop) * H) * sizeof(float));
  target.kept_start += drop;
  target.kept_count -= drop;
}

// Gated DeltaNet: projections, causal conv, L2-normalised q/k, gated delta rule, gated norm.
void Qwen35Model::gated_delta_net(const TensorView& out, const TensorView& x, int layer, State& state,
                                  DeltaRuleChoice choice) {
  const GatedDeltaNetWeights& w = weights_.layers[layer].gdn;
  State::Slot& slot = state.slots[layer];
  const int64_t T = x.dim(0), hv = config_.linear_num_value_heads, dv = config_.linear_value_head_dim;
  const int64_t conv_dim = config_.conv_dim();

  Buffer projected(DType::kF32, {T, conv_dim + hv * dv});  // [qkv | z]
  w.in_proj.forward(projected, x);
  Buffer ba(DType::kF32, {T, 2 * hv});  // [b | a]
  w.in_proj_ba.forward(ba, x);

  Buffer mixed(DType::kF32, {T, conv_dim}), z(DType::kF32, {T, hv, dv});
  copy_columns(mixed, projected, 0);
  copy_columns(z, projected, conv_dim);
  if (state.window_open) {
    slot.replay_mixed.insert(slot.replay_mixed.end(), mixed.f32(), mixed.f32() + mixed.numel());
    slot.replay_ba.insert(slot.replay_ba.end(), ba.f32(), ba.f32() + ba.numel());
  }

  Buffer core(DType::kF32, {T, hv, dv});
  const bool recurrent = choice == DeltaRuleChoice::kRecurrent || (choice == DeltaRuleChoice::kAuto && T == 1);
  gdn_core(core, mixed, ba, layer, slot.conv, slot.recurrent, recurrent);
  tap("gdn_core", layer, core);

  Buffer normed(DType::kF32, {T, hv * dv});
  ops::gated_rms_norm(normed, core, z, w.norm, config_.rms_norm_eps);
  tap("gdn_out", layer, normed);
  w.out_proj.forward(out, normed);
}

void Qwen35Model::gdn_core(const TensorView& core, const TensorView& mixed, const TensorView& ba, int layer,
                           const TensorView& conv_state, const TensorView& recurrent_state, bool recurrent) {
  const GatedDeltaNetWeights& w = weights_.layers[layer].gdn;
  const int64_t T = mixed.dim(0), hk = config_.linear_num_key_heads, hv = config_.linear_num_value_heads;
  const int64_t dk = config_.linear_key_head_dim, dv = config_.linear_value_head_dim;
  const int64_t conv_dim = config_.conv_dim();

  Buffer conv_out(DType::kF32, {T, conv_dim});
  ops::causal_conv1d_silu(conv_out, mixed, conv_state,
                          w.conv_weight.view().reshape({conv_dim, config_.linear_conv_kernel}));

  Buffer q(DType::kF32, {T, hk, dk}), k(DType::kF32, {T, hk, dk}), v(DType::kF32, {T, hv, dv});
  copy_columns(q, conv_out, 0);
  copy_columns(k, conv_out, hk * dk);
  copy_columns(v, conv_out, 2 * hk * dk);
  ops::l2_normalize(q, 1e-6f);
  ops::l2_normalize(k, 1e-6f);
  const float q_scale = 1.0f / std::sqrt(float(dk));
  for (int64_t i = 0; i < q.numel(); ++i) q.f32()[i] *= q_scale;

  // beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias)  (log of the decay, <= 0)
  Buffer beta(DType::kF32, {T, hv}), g(DType::kF32, {T, hv});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < hv; ++h) {
      beta.f32()[t * hv + h] = sigmoid(ba.f32()[t * 2 * hv + h]);
      const float a = ba.f32()[t * 2 * hv + hv + h];
      g.f32()[t * hv + h] = -std::exp(w.a_log.f32()[h]) * softplus(a + w.dt_bias.f32()[h]);
    }

  ops::gated_delta_rule(core, q, k, v, g, beta, recurrent_state,
                        recurrent ? ops::DeltaRuleMode::kRecurrent : ops::DeltaRuleMode::kChunked);
}

void Qwen35Model::rollback(SequenceState& base_state, int64_t length) {
  State& state = dynamic_cast<State&>(base_state);
  check_rollback(state, length);
  if (length == state.length()) return;
  const int64_t keep = length - state.rollback_floor(), conv_dim = config_.conv_dim();
  const int64_t hv = config_.linear_num_value_heads;
  for (int layer = 0; layer < int(config_.num_layers); ++layer) {
    State::Slot& slot = state.slots[layer];
    if (config_.layer_types[layer] != LayerKind::kLinearAttention) continue;  // KV: the length is enough
    std::memcpy(slot.conv.f32(), slot.checkpoint_conv.f32(), slot.conv.view().bytes());
    std::memcpy(slot.recurrent.f32(), slot.checkpoint_recurrent.f32(), slot.recurrent.view().bytes());
    slot.replay_mixed.resize(keep * conv_dim);
    slot.replay_ba.resize(keep * 2 * hv);
    if (keep == 0) continue;
    TensorView mixed{slot.replay_mixed.data(), DType::kF32, Device::kCpu, {keep, conv_dim}};
    TensorView ba{slot.replay_ba.data(), DType::kF32, Device::kCpu, {keep, 2 * hv}};
    Buffer core(DType::kF32, {keep, hv, config_.linear_value_head_dim});
    gdn_core(core, mixed, ba, layer, slot.conv, slot.recurrent, /*recurrent=*/true);
  }
  state.set_length(length);
}

std::unique_ptr<StateSnapshot> Qwen35Model::save_state(const SequenceState& base_state) {
  const State& state = dynamic_cast<const State&>(base_state);
  if (state.window_open) return nullptr;  // mid-verify: the length is not settled
  auto snapshot = std::make_unique<HostSnapshot>(state.length());
  const int64_t rows = state.length() * config_.num_kv_heads * config_.head_dim;
  for (const State::Slot& slot : state.slots) {
    if (!slot.k_cache.empty()) {
      snapshot->save(slot.k_cache.f32(), rows);
      snapshot->save(slot.v_cache.f32(), rows);
    } else {
      snapshot->save(slot.conv.f32(), slot.conv.numel());
      snapshot->save(slot.recurrent.f32(), slot.recurrent.numel());
    }
  }
  return snapshot;
}

void Qwen35Model::restore_state(const StateSnapshot& base_snapshot, SequenceState& base_state) {
  const auto& snapshot = dynamic_cast<const HostSnapshot&>(base_snapshot);
  State& state = dynamic_cast<State&>(base_state);
  VT_CHECK(state.length() == 0 && snapshot.length() <= state.capacity(), "restore_state: a new sequence of capacity >= ",
           snapshot.length(), " (has ", state.length(), " tokens, capacity ", state.capacity(), ")");
  size_t next = 0;
  for (State::Slot& slot : state.slots) {
    snapshot.restore_next(slot.k_cache.empty() ? slot.conv.f32() : slot.k_cache.f32(), &next);
    snapshot.restore_next(slot.k_cache.empty() ? slot.recurrent.f32() : slot.v_cache.f32(), &next);
  }
  state.length_ = state.rollback_floor_ = snapshot.length();
  state.kept_start = snapshot.length();
  state.kept_count = 0;
}

void Qwen35Model::commit(SequenceState& base_state) { dynamic_cast<State&>(base_state).close_window(); }

// Gated attention: q (+ per-head gate), q/k norm, partial RoPE, causal GQA, sigmoid gate, o_proj.
void Qwen35Model::attention(const TensorView& out, const TensorView& x, const AttentionWeights& w,
                            const TensorView& k_cache, const TensorView& v_cache, int64_t start) {
  const int64_t T = x.dim(0), hq = config_.num_heads, hkv = config_.num_kv_heads, d = config_.head_dim;

  Buffer projected(DType::kF32, {T, hq * 2 * d + 2 * hkv * d});  // [q|gate per head] k v
  w.qkv.forward(projected, x);
  Buffer q(DType::kF32, {T, hq, d}), gate(DType::kF32, {T, hq * d});
  const int64_t width = projected.shape()[1];
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < hq; ++h) {
      const float* head = projected.f32() + t * width + h * 2 * d;
      std::memcpy(q.f32() + (t * hq + h) * d, head, d * sizeof(float));
      std::memcpy(gate.f32() + (t * hq + h) * d, head + d, d * sizeof(float));
    }
  // New keys and values go straight into the cache rows [start, start + T).
  TensorView k_new = k_cache.rows(start, start + T);
  TensorView v_new = v_cache.rows(start, start + T);
  copy_columns(k_new, projected, hq * 2 * d);
  copy_columns(v_new, projected, hq * 2 * d + hkv * d);

  ops::rms_norm(q, q, w.q_norm, config_.rms_norm_eps, 1.0f);
  ops::rms_norm(k_new, k_new, w.k_norm, config_.rms_norm_eps, 1.0f);
  Buffer positions(DType::kI64, {T});
  for (int64_t t = 0; t < T; ++t) positions.view().as<int64_t>()[t] = start + t;
  ops::rope_neox(q, positions, config_.rotary_dim, config_.rope);
  ops::rope_neox(k_new, positions, config_.rotary_dim, config_.rope);

  Buffer attended(DType::kF32, {T, hq, d});
  ops::attention_causal(attended, q, k_cache, v_cache, start, 1.0f / std::sqrt(float(d)));
  for (int64_t i = 0; i < attended.numel(); ++i) attended.f32()[i] *= sigmoid(gate.f32()[i]);
  w.o_proj.forward(out, attended.view().reshape({T, hq * d}));
}

void Qwen35Model::mlp(const TensorView& out, const TensorView& x, const MlpWeights& w) {
  const int64_t T = x.dim(0), inter = w.down.in_features();
  Buffer gate_up(DType::kF32, {T, 2 * inter}), activated(DType::kF32, {T, inter});
  w.gate_up.forward(gate_up, x);
  ops::silu_mul(activated, gate_up);
  w.down.forward(out, activated);
}

// MoE: softmax router, top-k experts per token, weighted sum, plus a sigmoid-gated shared expert.
void Qwen35Model::moe(const TensorView& out, const TensorView& x, const MoeWeights& w) {
  const int64_t T = x.dim(0), hidden = config_.hidden_size, top_k = config_.num_experts_per_tok;
  Buffer router_logits(DType::kF32, {T, config_.num_experts});
  w.router.forward(router_logits, x);
  Buffer expert_ids(DType::kI32, {T, top_k}), expert_weights(DType::kF32, {T, top_k});
  ops::moe_route(expert_ids, expert_weights, router_logits, config_.norm_topk_prob);

  std::memset(out.data, 0, out.bytes());
  for (int64_t e = 0; e < config_.num_experts; ++e) {
    std::vector<int64_t> rows;  // (token, slot) pairs routed to expert e, in token order
    std::vector<float> scales;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < top_k; ++j)
        if (expert_ids.view().as<int32_t>()[t * top_k + j] == e) {
          rows.push_back(t);
          scales.push_back(expert_weights.f32()[t * top_k + j]);
        }
    if (rows.empty()) continue;
    const int64_t n = int64_t(rows.size());
    Buffer gathered(DType::kF32, {n, hidden}), expert_out(DType::kF32, {n, hidden});
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(gathered.f32() + i * hidden, x.f32() + rows[i] * hidden, hidden * sizeof(float));
    mlp(expert_out, gathered, w.experts[e]);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < hidden; ++c) out.f32()[rows[i] * hidden + c] += scales[i] * expert_out.f32()[i * hidden + c];
  }
  if (config_.shared_expert_intermediate_size > 0) {
    Buffer shared(DType::kF32, {T, hidden}), gate(DType::kF32, {T, 1});
    mlp(shared, x, w.shared_expert);
    w.shared_expert_gate.forward(gate, x);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < hidden; ++c)
        out.f32()[t * hidden + c] += sigmoid(gate.f32()[t]) * shared.f32()[t * hidden + c];
  }
}

std::string Qwen35Model::describe() const {
  std::ostringstream text;
  const auto& c = config_;
  text << "architecture: " << c.architecture << "\n"
       << "weights: " << store_.names().size() << " tensors, " << store_.total_bytes() << " bytes"
       << (c.fp8 ? " (fp8 block-scaled " + std::to_string(c.fp8->block_n) + "x" + std::to_string(c.fp8->block_k) + ")" : "")
       << "\n"
       << "vocab " << c.vocab_size << ", hidden " << c.hidden_size << ", layers " << c.num_layers
       << ", rms_norm_eps " << c.rms_norm_eps << ", tied embeddings " << (c.tie_word_embeddings ? "yes" : "no") << "\n"
       << "attention: heads " << c.num_heads << " / kv " << c.num_kv_heads << " x " << c.head_dim
       << ", rotary dims " << c.rotary_dim << ", theta " << c.rope.theta;
  if (c.rope.factor != 1.0f) text << ", YaRN x" << c.rope.factor << " (attention factor " << c.rope.attention_factor << ")";
  text << "\n"
       << "gated deltanet: key heads " << c.linear_num_key_heads << " x " << c.linear_key_head_dim
       << ", value heads " << c.linear_num_value_heads << " x " << c.linear_value_head_dim << ", conv "
       << c.linear_conv_kernel << "\n";
  if (c.num_experts)
    text << "moe: " << c.num_experts << " experts, top " << c.num_experts_per_tok << ", expert "
         << c.moe_intermediate_size << ", shared " << c.shared_expert_intermediate_size
         << (c.norm_topk_prob ? ", renormalised" : "") << "\n";
  else
    text << "mlp: intermediate " << c.intermediate_size << "\n";
  text << "layers:";
  for (int64_t i = 0; i < c.num_layers; ++i)
    text << (i % 8 ? " " : "\n  ") << i << ":" << (c.layer_types[i] == LayerKind::kFullAttention ? "attn" : "gdn")
         << (c.layer_is_moe(i) ? "+moe" : "");
  text << "\n";
  for (const auto& [prefix, reason] : store_.ignored()) text << "ignored: " << prefix << "* (" << reason << ")\n";
  return text.str();
}

}  // namespace vt
