// Llama forward, top to bottom like the architecture:
//   x = embed(tokens)
//   for each layer:  x += o_proj(attention(rope(q), rope(k), v))   on rms_norm(x)
//                    x += down(silu(gate) * up)                      on rms_norm(x)
//   logits = lm_head(rms_norm(x))
#include "models/llama/model.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "model/host_snapshot.h"
#include "ops/ops.h"

namespace vt {

LlamaConfig parse_llama_config(const GgufFile& file) {
  const std::string architecture = file.get_string("general.architecture");
  VT_CHECK(architecture == "llama", file.path(), ": general.architecture is '", architecture,
           "'; vt runs GGUF files of architecture 'llama'");
  LlamaConfig config;
  const std::string p = "llama.";
  if (file.has("general.name")) config.name = file.get_string("general.name");
  config.hidden_size = file.get_int(p + "embedding_length");
  config.num_layers = file.get_int(p + "block_count");
  config.intermediate_size = file.get_int(p + "feed_forward_length");
  config.num_heads = file.get_int(p + "attention.head_count");
  config.num_kv_heads = file.has(p + "attention.head_count_kv") ? file.get_int(p + "attention.head_count_kv")
                                                                 : config.num_heads;
  config.max_position_embeddings = file.get_int(p + "context_length");
  config.rms_norm_eps = float(file.get_float(p + "attention.layer_norm_rms_epsilon"));
  if (file.has(p + "rope.freq_base")) config.rope_theta = float(file.get_float(p + "rope.freq_base"));
  const std::string where = file.path() + ": llama metadata";
  VT_CHECK(config.hidden_size > 0 && config.num_layers > 0 && config.intermediate_size > 0 &&
               config.num_heads > 0 && config.num_kv_heads > 0 && config.max_position_embeddings > 0,
           where, ": sizes must be positive");
  VT_CHECK(config.num_heads % config.num_kv_heads == 0, where, ": head_count ", config.num_heads,
           " is not a multiple of head_count_kv ", config.num_kv_heads);
  config.head_dim = file.has(p + "attention.key_length") ? file.get_int(p + "attention.key_length")
                                                         : config.hidden_size / config.num_heads;
  VT_CHECK(config.head_dim > 0 && config.head_dim % 2 == 0, where, ": head dim ", config.head_dim, " must be even");
  if (file.has(p + "attention.value_length"))
    VT_CHECK(file.get_int(p + "attention.value_length") == config.head_dim, where,
             ": key_length and value_length differ");
  if (file.has(p + "rope.dimension_count"))
    VT_CHECK(file.get_int(p + "rope.dimension_count") == config.head_dim, where, ": rope.dimension_count ",
             file.get_int(p + "rope.dimension_count"), " != head dim ", config.head_dim, " (partial RoPE)");
  if (file.has(p + "rope.scaling.type")) {
    const std::string scaling = file.get_string(p + "rope.scaling.type");
    VT_CHECK(scaling == "none", where, ": rope scaling '", scaling, "' is not supported");
  }
  VT_CHECK(config.rms_norm_eps > 0 && config.rope_theta > 0, where, ": eps and rope theta must be positive");
  VT_CHECK(!file.find("rope_freqs.weight"), file.path(), ": rope_freqs.weight (Llama 3.1 rope scaling) is not supported");

  const GgufTensor* embedding = file.find("token_embd.weight");
  VT_CHECK(embedding && embedding->shape.rank() == 2, file.path(), ": no 2-D tensor 'token_embd.weight'");
  config.vocab_size = embedding->shape[0];
  if (file.has(p + "vocab_size"))
    VT_CHECK(file.get_int(p + "vocab_size") == config.vocab_size, where, ": vocab_size ",
             file.get_int(p + "vocab_size"), " disagrees with token_embd.weight ", embedding->shape.str());
  config.tie_word_embeddings = file.find("output.weight") == nullptr;
  return config;
}

Buffer unpermute_rope_rows(const Buffer& weight, int64_t heads) {
  const int64_t rows = weight.shape()[0], columns = weight.shape()[1];
  VT_CHECK(rows % (2 * heads) == 0, "unpermute_rope_rows: ", rows, " rows do not split into ", heads,
           " heads of even size");
  const int64_t half = rows / heads / 2;
  Buffer out(DType::kF32, weight.shape());
  // Stored row 2j + s of a head is HF row s * half + j.
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < half; ++j)
      for (int64_t s = 0; s < 2; ++s)
        std::memcpy(out.f32() + (h * 2 * half + s * half + j) * columns,
                    weight.f32() + (h * 2 * half + 2 * j + s) * columns, columns * sizeof(float));
  return out;
}

namespace {

// Stacks f32 matrices of equal width along the rows into one Linear.
Linear stacked_linear(std::initializer_list<const Buffer*> parts) {
  int64_t rows = 0;
  const int64_t columns = (*parts.begin())->shape()[1];
  for (const Buffer* part : parts) rows += part->shape()[0];
  Buffer merged(DType::kF32, {rows, columns});
  int64_t row = 0;
  for (const Buffer* part : parts) {
    std::memcpy(merged.f32() + row * columns, part->f32(), part->view().bytes());
    row += part->shape()[0];
  }
  return Linear::from_f32(std::move(merged), WeightFormat::kDense, false);
}

LlamaWeights load_llama_weights(GgufFile& file, const LlamaConfig& config, const LoadProgress& progress) {
  const int64_t hidden = config.hidden_size, d = config.head_dim, inter = config.intermediate_size;
  const int64_t hq = config.num_heads, hkv = config.num_kv_heads;
  uint64_t total = 0, done = 0;
  for (const auto& tensor : file.header().tensors) total += tensor.bytes;
  auto take = [&](const std::string& name, const Shape& shape) {
    Buffer out = file.take_f32(name, shape);
    done += file.find(name)->bytes;
    if (progress) progress(done, total);
    return out;
  };

  LlamaWeights weights;
  Buffer embedding = take("token_embd.weight", {config.vocab_size, hidden});
  for (int64_t i = 0; i < config.num_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LlamaLayerWeights layer;
    layer.attention_norm = take(p + "attn_norm.weight", {hidden});
    Buffer q = unpermute_rope_rows(take(p + "attn_q.weight", {hq * d, hidden}), hq);
    Buffer k = unpermute_rope_rows(take(p + "attn_k.weight", {hkv * d, hidden}), hkv);
    Buffer v = take(p + "attn_v.weight", {hkv * d, hidden});
    layer.qkv = stacked_linear({&q, &k, &v});
    layer.o_proj = Linear::from_f32(take(p + "attn_output.weight", {hidden, hq * d}), WeightFormat::kDense, false);
    layer.ffn_norm = take(p + "ffn_norm.weight", {hidden});
    Buffer gate = take(p + "ffn_gate.weight", {inter, hidden});
    Buffer up = take(p + "ffn_up.weight", {inter, hidden});
    layer.gate_up = stacked_linear({&gate, &up});
    layer.down = Linear::from_f32(take(p + "ffn_down.weight", {hidden, inter}), WeightFormat::kDense, false);
    weights.layers.push_back(std::move(layer));
  }
  weights.final_norm = take("output_norm.weight", {hidden});
  if (config.tie_word_embeddings) {
    weights.lm_head = Linear::from_f32(std::move(embedding), WeightFormat::kDense, false);
    weights.embed_tokens = weights.lm_head.weight().view();
  } else {
    weights.lm_head = Linear::from_f32(take("output.weight", {config.vocab_size, hidden}), WeightFormat::kDense, false);
    weights.embedding_table = std::move(embedding);
    weights.embed_tokens = weights.embedding_table.view();
  }
  file.finish();
  return weights;
}

}  // namespace

// A KV cache per layer for one sequence.
class LlamaModel::State final : public SequenceState {
 public:
  State(const LlamaConfig& config, int64_t capacity) {
    capacity_ = capacity;
    for (int64_t i = 0; i < config.num_layers; ++i) {
      k_cache.emplace_back(DType::kF32, Shape{capacity, config.num_kv_heads, config.head_dim});
      v_cache.emplace_back(DType::kF32, Shape{capacity, config.num_kv_heads, config.head_dim});
    }
  }
  std::vector<Buffer> k_cache, v_cache;  // per layer [capacity, Hkv, D]
  int64_t start() const { return length_; }
  void advance(int64_t tokens) { length_ += tokens; }
  void set_length(int64_t length) { length_ = length; }
};

LlamaModel::LlamaModel(const std::string& gguf_path, const LoadProgress& progress)
    : file_(gguf_path), config_(parse_llama_config(file_)) {
  weights_ = load_llama_weights(file_, config_, progress);
  info_.architecture = "llama";
  info_.vocab_size = config_.vocab_size;
  info_.max_positions = config_.max_position_embeddings;
  const int64_t H = config_.hidden_size, q_width = config_.num_heads * config_.head_dim;
  // q, k, v, o and the SwiGLU MLP of every layer.
  info_.layer_weights_per_token =
      config_.num_layers * (2 * H * q_width + 2 * H * config_.num_kv_heads * config_.head_dim +
                            3 * H * config_.intermediate_size);
  info_.attention_layers = config_.num_layers;
  info_.attention_heads = config_.num_heads;
  info_.attention_head_dim = config_.head_dim;
}

std::unique_ptr<SequenceState> LlamaModel::new_sequence(int64_t capacity) const {
  VT_CHECK(capacity > 0 && capacity <= config_.max_position_embeddings, "sequence capacity ", capacity,
           " must be in [1, ", config_.max_position_embeddings, "]");
  return std::make_unique<State>(config_, capacity);
}

std::unique_ptr<StateSnapshot> LlamaModel::save_state(const SequenceState& base_state) {
  const State& state = dynamic_cast<const State&>(base_state);
  auto snapshot = std::make_unique<HostSnapshot>(state.length());
  const int64_t rows = state.length() * config_.num_kv_heads * config_.head_dim;
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    snapshot->save(state.k_cache[size_t(i)].f32(), rows);
    snapshot->save(state.v_cache[size_t(i)].f32(), rows);
  }
  return snapshot;
}

void LlamaModel::restore_state(const StateSnapshot& base_snapshot, SequenceState& base_state) {
  const auto& snapshot = dynamic_cast<const HostSnapshot&>(base_snapshot);
  State& state = dynamic_cast<State&>(base_state);
  VT_CHECK(state.length() == 0 && snapshot.length() <= state.capacity(), "restore_state: a new sequence of capacity >= ",
           snapshot.length(), " (has ", state.length(), " tokens, capacity ", state.capacity(), ")");
  size_t next = 0;
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    snapshot.restore_next(state.k_cache[size_t(i)].f32(), &next);
    snapshot.restore_next(state.v_cache[size_t(i)].f32(), &next);
  }
  state.set_length(snapshot.length());
}

void LlamaModel::forward(std::span<const int32_t> tokens, SequenceState& base_state, const TensorView& logits,
                         const ForwardOptions& options) {
  State& state = dynamic_cast<State&>(base_state);
  const int64_t num_tokens = int64_t(tokens.size()), hidden = config_.hidden_size;
  const int64_t logit_rows = check_forward(state, num_tokens, logits, config_.vocab_size, options.all_logits);

  TensorView ids{const_cast<int32_t*>(tokens.data()), DType::kI32, Device::kCpu, {num_tokens}};
  Buffer x(DType::kF32, {num_tokens, hidden}), normed(DType::kF32, {num_tokens, hidden});
  Buffer branch(DType::kF32, {num_tokens, hidden});
  ops::embedding(x, ids, weights_.embed_tokens);
  tap("embed", -1, x);

  for (int layer = 0; layer < int(config_.num_layers); ++layer) {
    const LlamaLayerWeights& w = weights_.layers[layer];
    ops::rms_norm(normed, x, w.attention_norm, config_.rms_norm_eps, 0.0f);
    attention(branch, normed, layer, state);
    tap("mixer_out", layer, branch);
    ops::add_in_place(x, branch);

    ops::rms_norm(normed, x, w.ffn_norm, config_.rms_norm_eps, 0.0f);
    mlp(branch, normed, w);
    tap("ffn_out", layer, branch);
    ops::add_in_place(x, branch);
    tap("layer_out", layer, x);
  }

  TensorView last = x.view().rows(num_tokens - logit_rows, num_tokens);
  Buffer final_normed(DType::kF32, {logit_rows, hidden});
  ops::rms_norm(final_normed, last, weights_.final_norm, config_.rms_norm_eps, 0.0f);
  weights_.lm_head.forward(logits, final_normed);
  state.advance(num_tokens);
}

void LlamaModel::rollback(SequenceState& base_state, int64_t length) {
  State& state = dynamic_cast<State&>(base_state);
  check_rollback(state, length);
  state.set_length(length);  // later rows of the KV cache are overwritten by the next forward
}

// Attention: q|k|v projection, RoPE on q and k (NeoX halves over the whole head), causal GQA.
void LlamaModel::attention(const TensorView& out, const TensorView& x, int layer, State& state) {
  const LlamaLayerWeights& w = weights_.layers[layer];
  const int64_t T = x.dim(0), hq = config_.num_heads, hkv = config_.num_kv_heads, d = config_.head_dim;
  const int64_t start = state.start(), width = (hq + 2 * hkv) * d;

  Buffer projected(DType::kF32, {T, width});  // q | k | v
  w.qkv.forward(projected, x);
  Buffer q(DType::kF32, {T, hq, d});
  // New keys and values go straight into the cache rows [start, start + T).
  TensorView k_new = state.k_cache[layer].view().rows(start, start + T);
  TensorView v_new = state.v_cache[layer].view().rows(start, start + T);
  for (int64_t t = 0; t < T; ++t) {
    const float* row = projected.f32() + t * width;
    std::memcpy(q.f32() + t * hq * d, row, hq * d * sizeof(float));
    std::memcpy(k_new.f32() + t * hkv * d, row + hq * d, hkv * d * sizeof(float));
    std::memcpy(v_new.f32() + t * hkv * d, row + (hq + hkv) * d, hkv * d * sizeof(float));
  }
  Buffer positions(DType::kI64, {T});
  for (int64_t t = 0; t < T; ++t) positions.view().as<int64_t>()[t] = start + t;
  ops::rope_neox(q, positions, d, Rope{config_.rope_theta});
  ops::rope_neox(k_new, positions, d, Rope{config_.rope_theta});

  Buffer attended(DType::kF32, {T, hq, d});
  ops::attention_causal(attended, q, state.k_cache[layer], state.v_cache[layer], start, 1.0f / std::sqrt(float(d)));
  w.o_proj.forward(out, attended.view().reshape({T, hq * d}));
}

// SwiGLU: down(silu(gate(x)) * up(x)).
void LlamaModel::mlp(const TensorView& out, const TensorView& x, const LlamaLayerWeights& w) {
  const int64_t T = x.dim(0), inter = config_.intermediate_size;
  Buffer gate_up(DType::kF32, {T, 2 * inter}), activated(DType::kF32, {T, inter});
  w.gate_up.forward(gate_up, x);
  ops::silu_mul(activated, gate_up);
  w.down.forward(out, activated);
}

std::string LlamaModel::describe() const {
  std::ostringstream text;
  const auto& c = config_;
  uint64_t bytes = 0;
  for (const auto& tensor : file_.header().tensors) bytes += tensor.bytes;
  text << "architecture: llama (GGUF v" << file_.header().version << (c.name.empty() ? "" : ", " + c.name) << ")\n"
       << "weights: " << file_.header().tensors.size() << " tensors, " << bytes
       << " bytes, dequantised to f32 on load\n"
       << "vocab " << c.vocab_size << ", hidden " << c.hidden_size << ", layers " << c.num_layers
       << ", rms_norm_eps " << c.rms_norm_eps << ", tied embeddings " << (c.tie_word_embeddings ? "yes" : "no") << "\n"
       << "attention: heads " << c.num_heads << " / kv " << c.num_kv_heads << " x " << c.head_dim
       << ", rotary dims " << c.head_dim << ", theta " << c.rope_theta << ", context " << c.max_position_embeddings
       << "\n"
       << "mlp: intermediate " << c.intermediate_size << "\n";
  return text.str();
}

void LlamaModel::quantize_lm_head_fp8(const Fp8Quantization& quantization) {
  VT_CHECK(weights_.lm_head.format() == WeightFormat::kDense, "the LM head is already FP8");
  Linear quantized = weights_.lm_head.to_fp8_blocks(quantization);
  if (config_.tie_word_embeddings) {  // the embedding keeps the original matrix
    weights_.embedding_table = std::move(weights_.lm_head.mutable_weight());
    weights_.embed_tokens = weights_.embedding_table.view();
  }
  weights_.lm_head = std::move(quantized);
}

}  // namespace vt
