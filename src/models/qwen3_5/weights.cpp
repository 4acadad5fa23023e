// Loading Qwen3.5-family checkpoints into Qwen35Weights: HF tensor names, merged projections,
// Qwen3-Next's interleaved GDN projections put into Qwen3.5's order, both MoE expert layouts.
#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "models/qwen3_5/model.h"

namespace vt {
namespace {

struct Loader {
  WeightStore& store;
  const Qwen35Config& config;
  LinearLoadOptions linear_options;

  Linear linear(const std::vector<LinearPart>& parts, int64_t in_features) {
    return Linear::load(store, parts, in_features, linear_options);
  }
  Buffer vector(const std::string& name, int64_t size) { return load_f32(store, name, {size}); }

  // Qwen3-Next stores in_proj_qkvz per key-head group as [q(dk) k(dk) v(r*dv) z(r*dv)] and
  // in_proj_ba as [b(r) a(r)]; reorder the rows into Qwen3.5's [q_all k_all v_all z_all], [b a].
  Linear next_in_proj(const std::string& name, int64_t hidden) {
    const int64_t hk = config.linear_num_key_heads, dk = config.linear_key_head_dim;
    const int64_t r = config.linear_num_value_heads / hk, dv = config.linear_value_head_dim;
    const int64_t group_rows = 2 * dk + 2 * r * dv;
    Linear interleaved = linear({{name, hk * group_rows}}, hidden);
    std::vector<int64_t> source_row;  // destination row -> source row
    for (int part = 0; part < 4; ++part)
      for (int64_t g = 0; g < hk; ++g) {
        const int64_t offsets[4] = {0, dk, 2 * dk, 2 * dk + r * dv};
        const int64_t sizes[4] = {dk, dk, r * dv, r * dv};
        for (int64_t i = 0; i < sizes[part]; ++i) source_row.push_back(g * group_rows + offsets[part] + i);
      }
    return permute_rows(std::move(interleaved), source_row);
  }
  Linear next_in_proj_ba(const std::string& name, int64_t hidden) {
    const int64_t hk = config.linear_num_key_heads, r = config.linear_num_value_heads / hk;
    Linear interleaved = linear({{name, hk * 2 * r}}, hidden);
    std::vector<int64_t> source_row;
    for (int part = 0; part < 2; ++part)
      for (int64_t g = 0; g < hk; ++g)
        for (int64_t i = 0; i < r; ++i) source_row.push_back(g * 2 * r + part * r + i);
    return permute_rows(std::move(interleaved), source_row);
  }
  static Linear permute_rows(Linear source, const std::vector<int64_t>& source_row) {
    const int64_t k = source.in_features();
    Buffer permuted(DType::kF32, source.weight().shape());
    for (size_t row = 0; row < source_row.size(); ++row)
      std::memcpy(permuted.f32() + row * k, source.weight().f32() + source_row[row] * k, k * sizeof(float));
    return Linear::from_f32(std::move(permuted), source.format(), source.quantizes_activations());
  }

  GatedDeltaNetWeights gated_delta_net(const std::string& p) {
    const int64_t hidden = config.hidden_size, hv = config.linear_num_value_heads;
    const int64_t conv_dim = config.conv_dim(), value_dim = config.linear_value_dim();
    GatedDeltaNetWeights w;
    if (config.variant == Qwen35Variant::kQwen3Next) {
      w.in_proj = next_in_proj(p + "in_proj_qkvz", hidden);
      w.in_proj_ba = next_in_proj_ba(p + "in_proj_ba", hidden);
    } else {
      w.in_proj = linear({{p + "in_proj_qkv", conv_dim}, {p + "in_proj_z", value_dim}}, hidden);
      w.in_proj_ba = linear({{p + "in_proj_b", hv}, {p + "in_proj_a", hv}}, hidden);
    }
    w.conv_weight = load_f32(store, p + "conv1d.weight", {conv_dim, 1, config.linear_conv_kernel});
    w.a_log = vector(p + "A_log", hv);
    w.dt_bias = vector(p + "dt_bias", hv);
    w.norm = vector(p + "norm.weight", config.linear_value_head_dim);
    w.out_proj = linear({{p + "out_proj", hidden}}, value_dim);
    return w;
  }

  AttentionWeights attention(const std::string& p) {
    const int64_t hidden = config.hidden_size, d = config.head_dim;
    AttentionWeights w;
    w.qkv = linear({{p + "q_proj", config.num_heads * d * 2},
                    {p + "k_proj", config.num_kv_heads * d},
                    {p + "v_proj", config.num_kv_heads * d}},
                   hidden);
    w.q_norm = vector(p + "q_norm.weight", d);
    w.k_norm = vector(p + "k_norm.weight", d);
    w.o_proj = linear({{p + "o_proj", hidden}}, config.num_heads * d);
    return w;
  }

  MlpWeights mlp(const std::string& p, int64_t intermediate) {
    MlpWeights w;
    w.gate_up = linear({{p + "gate_proj", intermediate}, {p + "up_proj", intermediate}}, config.hidden_size);
    w.down = linear({{p + "down_proj", config.hidden_size}}, intermediate);
    return w;
  }

  MoeWeights moe(const std::string& p) {
    const int64_t hidden = config.hidden_size, experts = config.num_experts;
    const int64_t inter = config.moe_intermediate_size;
    MoeWeights w;
    w.router = linear({{p + "gate", experts}}, hidden);
    if (store.contains(p + "experts.gate_up_proj")) {
      // Fused 3-D layout: gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I].
      Buffer gate_up = load_f32(store, p + "experts.gate_up_proj", {experts, 2 * inter, hidden});
      Buffer down = load_f32(store, p + "experts.down_proj", {experts, hidden, inter});
      for (int64_t e = 0; e < experts; ++e) {
        Buffer expert_gate_up(DType::kF32, {2 * inter, hidden}), expert_down(DType::kF32, {hidden, inter});
        std::memcpy(expert_gate_up.f32(), gate_up.f32() + e * 2 * inter * hidden, 2 * inter * hidden * 4);
        std::memcpy(expert_down.f32(), down.f32() + e * hidden * inter, hidden * inter * 4);
        w.experts.push_back({Linear::from_f32(std::move(expert_gate_up), WeightFormat::kDense, false),
                             Linear::from_f32(std::move(expert_down), WeightFormat::kDense, false)});
      }
    } else {
      for (int64_t e = 0; e < experts; ++e) w.experts.push_back(mlp(p + "experts." + std::to_string(e) + ".", inter));
    }
    if (config.shared_expert_intermediate_size > 0) {
      w.shared_expert = mlp(p + "shared_expert.", config.shared_expert_intermediate_size);
      w.shared_expert_gate = linear({{p + "shared_expert_gate", 1}}, hidden);
    }
    return w;
  }

  // The MTP head under `mtp.` (top level in every layout): one full-attention decoder layer whose
  // FFN is the family's layer-0 kind (dense or MoE), as vLLM's qwen3_next_mtp / qwen3_5_mtp.
  MtpWeights mtp() {
    const int64_t hidden = config.hidden_size;
    VT_CHECK(store.contains("mtp.fc.weight"), store.dir(),
             ": the checkpoint has no MTP head (no mtp.fc.weight), needed by MTP drafting");
    VT_CHECK(config.mtp_num_layers <= 1 && !store.contains("mtp.layers.1.input_layernorm.weight"), store.dir(),
             ": an MTP head of ", std::max<int64_t>(config.mtp_num_layers, 2), " layers; vt runs one");
    MtpWeights w;
    w.pre_fc_norm_embedding = vector("mtp.pre_fc_norm_embedding.weight", hidden);
    w.pre_fc_norm_hidden = vector("mtp.pre_fc_norm_hidden.weight", hidden);
    w.fc = linear({{"mtp.fc", hidden}}, 2 * hidden);
    const std::string p = "mtp.layers.0.";
    w.layer.kind = LayerKind::kFullAttention;
    w.layer.input_norm = vector(p + "input_layernorm.weight", hidden);
    w.layer.post_attention_norm = vector(p + "post_attention_layernorm.weight", hidden);
    w.layer.attention = attention(p + "self_attn.");
    w.layer.is_moe = config.layer_is_moe(0);
    if (w.layer.is_moe) w.layer.moe = moe(p + "mlp.");
    else w.layer.mlp = mlp(p + "mlp.", config.intermediate_size);
    w.norm = vector("mtp.norm.weight", hidden);
    return w;
  }
};

}  // namespace

Qwen35Weights load_qwen35_weights(WeightStore& store, const Qwen35Config& config,
                                  const Qwen35LoadOptions& options) {
  LinearLoadOptions linear_options;
  if (config.fp8) {
    linear_options.fp8_checkpoint = true;
    linear_options.block_n = config.fp8->block_n;
    linear_options.block_k = config.fp8->block_k;
  }
  linear_options.fp8_activations = options.fp8_activations;
  Loader load{store, config, linear_options};

  const std::string& prefix = config.weight_prefix;
  const int64_t hidden = config.hidden_size;
  Qwen35Weights weights;
  weights.embed_tokens = store.take(prefix + "embed_tokens.weight", {config.vocab_size, hidden},
                                    {DType::kF32, DType::kBF16, DType::kF16});
  for (int64_t i = 0; i < config.num_layers; ++i) {
    const std::string p = prefix + "layers." + std::to_string(i) + ".";
    LayerWeights layer;
    layer.kind = config.layer_types[i];
    layer.input_norm = load.vector(p + "input_layernorm.weight", hidden);
    layer.post_attention_norm = load.vector(p + "post_attention_layernorm.weight", hidden);
    if (layer.kind == LayerKind::kLinearAttention) layer.gdn = load.gated_delta_net(p + "linear_attn.");
    else layer.attention = load.attention(p + "self_attn.");
    layer.is_moe = config.layer_is_moe(i);
    if (layer.is_moe) layer.moe = load.moe(p + "mlp.");
    else layer.mlp = load.mlp(p + "mlp.", config.intermediate_size);
    weights.layers.push_back(std::move(layer));
  }
  weights.final_norm = load.vector(prefix + "norm.weight", hidden);
  if (config.tie_word_embeddings) {
    Buffer table(DType::kF32, {config.vocab_size, hidden});
    cpu::to_f32(table.f32(), weights.embed_tokens.data, weights.embed_tokens.dtype, table.numel());
    weights.lm_head = Linear::from_f32(std::move(table), WeightFormat::kDense, false);
  } else {
    weights.lm_head = load.linear({{"lm_head", config.vocab_size}}, hidden);
  }
  if (config.has_vision_tower) store.ignore_prefix("model.visual.", "vision tower (text-only inference)");
  if (options.load_mtp) weights.mtp = load.mtp();
  else store.ignore_prefix("mtp.", "multi-token-prediction head (loaded for --speculative mtp)");
  store.finish();
  return weights;
}

}  // namespace vt
