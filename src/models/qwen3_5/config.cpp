#include "models/qwen3_5/config.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace vt {
namespace {

struct ArchitectureInfo {
  const char* name;
  Qwen35Variant variant;
  bool vision_layout;
};

constexpr ArchitectureInfo kArchitectures[] = {
    {"Qwen3_5ForCausalLM", Qwen35Variant::kQwen35, false},
    {"Qwen3_5ForConditionalGeneration", Qwen35Variant::kQwen35, true},
    {"Qwen3_5MoeForCausalLM", Qwen35Variant::kQwen35Moe, false},
    {"Qwen3_5MoeForConditionalGeneration", Qwen35Variant::kQwen35Moe, true},
    {"Qwen3NextForCausalLM", Qwen35Variant::kQwen3Next, false},
};

// A number that may be missing or null (HF writes null for "not set").
std::optional<double> optional_number(const JsonObject& object, const std::string& key) {
  if (!object.has(key) || object.raw().at(key).is_null()) return std::nullopt;
  return object.get_number(key);
}

// YaRN's keys (HF's rope_parameters, or the older rope_scaling); a 0 or null beta takes the
// paper's default as HF does.
YarnConfig parse_yarn(const JsonObject& rope, const Qwen35Config& config) {
  YarnConfig yarn;
  yarn.original_max_position_embeddings =
      rope.get_int("original_max_position_embeddings", config.max_position_embeddings);
  VT_CHECK(yarn.original_max_position_embeddings > 0, rope.where(), ".original_max_position_embeddings must be positive");
  yarn.factor = optional_number(rope, "factor")
                    .value_or(double(config.max_position_embeddings) / double(yarn.original_max_position_embeddings));
  VT_CHECK(yarn.factor >= 1.0, rope.where(), ".factor ", yarn.factor, " must be at least 1");
  if (auto beta = optional_number(rope, "beta_fast"); beta && *beta != 0) yarn.beta_fast = *beta;
  if (auto beta = optional_number(rope, "beta_slow"); beta && *beta != 0) yarn.beta_slow = *beta;
  VT_CHECK(yarn.beta_fast > 0 && yarn.beta_slow > 0, rope.where(), ": beta_fast and beta_slow must be positive");
  yarn.attention_factor = optional_number(rope, "attention_factor");
  VT_CHECK(!yarn.attention_factor || *yarn.attention_factor > 0, rope.where(), ".attention_factor must be positive");
  yarn.mscale = optional_number(rope, "mscale");
  yarn.mscale_all_dim = optional_number(rope, "mscale_all_dim");
  yarn.truncate = rope.get_bool("truncate", true);
  return yarn;
}

void parse_rope(const JsonObject& text, Qwen35Config& config) {
  double theta = text.get_number("rope_theta", 10000.0);
  double partial = text.get_number("partial_rotary_factor", 1.0);
  // rope_parameters (HF 5) or rope_scaling (HF 4): "default" / "mrope" (text positions make
  // Qwen3.5's multimodal RoPE the plain one) or "yarn".
  const std::optional<JsonObject> rope =
      text.has("rope_parameters") ? text.optional_child("rope_parameters") : text.optional_child("rope_scaling");
  bool yarn = false;
  if (rope) {
    std::string type = rope->get_string("rope_type", rope->get_string("type", "default"));
    yarn = type == "yarn";
    if (!yarn && type != "default" && type != "mrope")
      VT_FAIL(rope->where(), ".rope_type: '", type, "' is not supported (default, mrope or yarn)");
    theta = rope->get_number("rope_theta", theta);
    partial = rope->get_number("partial_rotary_factor", partial);
  }
  VT_CHECK(theta > 0, text.where(), ": rope_theta must be positive");
  VT_CHECK(partial > 0 && partial <= 1, text.where(), ": partial_rotary_factor ", partial,
           " must be in (0, 1]");
  config.rotary_dim = int64_t(double(config.head_dim) * partial);  // int() as HF
  VT_CHECK(config.rotary_dim % 2 == 0 && config.rotary_dim > 0, text.where(), ": rotary dim ",
           config.rotary_dim, " must be even and positive");
  config.rope = yarn ? yarn_rope(theta, config.rotary_dim, parse_yarn(*rope, config)) : Rope{float(theta)};
}

void parse_quantization(const JsonObject& object, Qwen35Config& config) {
  auto quant = object.optional_child("quantization_config");
  if (!quant) return;
  std::string method = quant->get_string("quant_method");
  if (method != "fp8") VT_FAIL(quant->where(), ".quant_method: '", method, "' is not supported (fp8 only)");
  std::string fmt = quant->get_string("fmt", "e4m3");
  VT_CHECK(fmt == "e4m3", quant->where(), ".fmt: '", fmt, "' is not supported (e4m3 only)");
  std::string scheme = quant->get_string("activation_scheme", "dynamic");
  VT_CHECK(scheme == "dynamic", quant->where(), ".activation_scheme: '", scheme,
           "' is not supported (dynamic only)");
  Fp8BlockConfig fp8;
  if (quant->has("weight_block_size")) {
    auto block = quant->get_ints("weight_block_size");
    VT_CHECK(block.size() == 2 && block[0] > 0 && block[1] > 0, quant->where(),
             ".weight_block_size must be [n, k]");
    fp8.block_n = block[0];
    fp8.block_k = block[1];
  } else {
    VT_FAIL(quant->where(), ": per-tensor FP8 (no weight_block_size) is not supported");
  }
  if (quant->has("modules_to_not_convert"))
    fp8.modules_to_not_convert = quant->get_strings("modules_to_not_convert");
  config.fp8 = fp8;
}

}  // namespace

bool is_qwen35_architecture(const std::string& architecture) {
  return std::any_of(std::begin(kArchitectures), std::end(kArchitectures),
                     [&](const auto& info) { return architecture == info.name; });
}

bool Qwen35Config::layer_is_moe(int64_t layer) const {
  if (num_experts == 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end())
    return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

int64_t Qwen35Config::full_attention_layers() const {
  return int64_t(std::count(layer_types.begin(), layer_types.end(), LayerKind::kFullAttention));
}

ModelInfo Qwen35Config::model_info() const {
  ModelInfo info;
  info.architecture = architecture;
  info.vocab_size = vocab_size;
  info.max_positions = max_position_embeddings;
  info.layer_weights_per_token = layer_weights_per_token();
  info.attention_layers = full_attention_layers();
  info.attention_heads = num_heads;
  info.attention_head_dim = head_dim;
  return info;
}

int64_t Qwen35Config::layer_weights_per_token() const {
  const int64_t H = hidden_size;
  // Gated attention: q and its gate, k, v, o.
  const int64_t attention = H * (2 * num_heads * head_dim) + 2 * H * num_kv_heads * head_dim + num_heads * head_dim * H;
  // Gated DeltaNet: in_proj_qkvz, in_proj_ba, the short convolution, out_proj, and the [k, v]
  // state each value head reads and updates once per token.
  const int64_t key_dim = linear_num_key_heads * linear_key_head_dim;
  const int64_t delta_net = H * (2 * key_dim + 2 * linear_value_dim()) + H * 2 * linear_num_value_heads +
                            conv_dim() * linear_conv_kernel + linear_value_dim() * H +
                            2 * linear_num_value_heads * linear_key_head_dim * linear_value_head_dim;
  int64_t total = 0;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    total += layer_types[size_t(layer)] == LayerKind::kFullAttention ? attention : delta_net;
    total += layer_is_moe(layer) ? H * num_experts + num_experts_per_tok * 3 * H * moe_intermediate_size +
                                       3 * H * shared_expert_intermediate_size + H
                                 : 3 * H * intermediate_size;
  }
  return total;
}

Qwen35Config parse_qwen35_config(const std::string& path) {
  nlohmann::json json = read_json_file(path);
  JsonObject root(json, path);
  Qwen35Config config;
  auto architectures = root.get_strings("architectures");
  VT_CHECK(!architectures.empty(), path, ": 'architectures' is empty");
  config.architecture = architectures[0];
  const ArchitectureInfo* info = nullptr;
  for (const auto& candidate : kArchitectures)
    if (config.architecture == candidate.name) info = &candidate;
  if (!info) VT_FAIL(path, ": unknown architecture '", config.architecture, "'");
  config.variant = info->variant;
  config.has_vision_tower = info->vision_layout;
  config.weight_prefix = info->vision_layout ? "model.language_model." : "model.";

  // VL checkpoints nest the text model's fields under text_config.
  JsonObject text = info->vision_layout ? root.child("text_config") : root;
  config.vocab_size = text.get_int("vocab_size");
  config.hidden_size = text.get_int("hidden_size");
  config.num_layers = text.get_int("num_hidden_layers");
  config.rms_norm_eps = float(text.get_number("rms_norm_eps", 1e-6));
  // tie_word_embeddings may sit at either level in VL configs.
  config.tie_word_embeddings =
      text.get_bool("tie_word_embeddings", root.get_bool("tie_word_embeddings", false));
  config.max_position_embeddings = text.get_int("max_position_embeddings", 262144);
  config.num_heads = text.get_int("num_attention_heads");
  config.num_kv_heads = text.get_int("num_key_value_heads");
  config.head_dim = text.get_int("head_dim", config.num_heads > 0 ? config.hidden_size / config.num_heads : 0);
  config.linear_num_key_heads = text.get_int("linear_num_key_heads");
  config.linear_num_value_heads = text.get_int("linear_num_value_heads");
  config.linear_key_head_dim = text.get_int("linear_key_head_dim");
  config.linear_value_head_dim = text.get_int("linear_value_head_dim");
  config.linear_conv_kernel = text.get_int("linear_conv_kernel_dim", 4);
  config.intermediate_size = text.get_int("intermediate_size", 0);
  config.mtp_num_layers = text.get_int("mtp_num_hidden_layers", 0);

  for (auto [value, name] : {std::pair{config.vocab_size, "vocab_size"}, {config.hidden_size, "hidden_size"},
                             {config.num_layers, "num_hidden_layers"}, {config.num_heads, "num_attention_heads"},
                             {config.num_kv_heads, "num_key_value_heads"}, {config.head_dim, "head_dim"},
                             {config.linear_num_key_heads, "linear_num_key_heads"},
                             {config.linear_num_value_heads, "linear_num_value_heads"},
                             {config.linear_key_head_dim, "linear_key_head_dim"},
                             {config.linear_value_head_dim, "linear_value_head_dim"},
                             {config.linear_conv_kernel, "linear_conv_kernel_dim"}}) {
    VT_CHECK(value > 0 && value < (int64_t(1) << 31), text.where(), ".", name, " = ", value,
             " is out of range");
  }
  VT_CHECK(config.num_heads % config.num_kv_heads == 0, text.where(), ": num_attention_heads ",
           config.num_heads, " is not a multiple of num_key_value_heads ", config.num_kv_heads);
  VT_CHECK(config.linear_num_value_heads % config.linear_num_key_heads == 0, text.where(),
           ": linear_num_value_heads is not a multiple of linear_num_key_heads");
  parse_rope(text, config);

  if (text.has("layer_types")) {
    auto types = text.get_strings("layer_types");
    VT_CHECK(int64_t(types.size()) >= config.num_layers, text.where(), ".layer_types has ",
             types.size(), " entries for ", config.num_layers, " layers");
    for (int64_t i = 0; i < config.num_layers; ++i) {
      if (types[i] == "linear_attention") config.layer_types.push_back(LayerKind::kLinearAttention);
      else if (types[i] == "full_attention") config.layer_types.push_back(LayerKind::kFullAttention);
      else VT_FAIL(text.where(), ".layer_types[", i, "]: unknown layer type '", types[i], "'");
    }
  } else {
    int64_t interval = text.get_int("full_attention_interval", 4);
    VT_CHECK(interval > 0, text.where(), ".full_attention_interval must be positive");
    for (int64_t i = 0; i < config.num_layers; ++i)
      config.layer_types.push_back((i + 1) % interval == 0 ? LayerKind::kFullAttention
                                                           : LayerKind::kLinearAttention);
  }

  if (config.variant != Qwen35Variant::kQwen35) {
    config.num_experts = text.get_int("num_experts", 0);
  }
  if (config.num_experts > 0) {
    config.num_experts_per_tok = text.get_int("num_experts_per_tok");
    config.moe_intermediate_size = text.get_int("moe_intermediate_size");
    config.shared_expert_intermediate_size = text.get_int("shared_expert_intermediate_size");
    VT_CHECK(config.num_experts_per_tok > 0 && config.num_experts_per_tok <= config.num_experts,
             text.where(), ".num_experts_per_tok out of range");
    VT_CHECK(config.moe_intermediate_size > 0 && config.shared_expert_intermediate_size >= 0,
             text.where(), ": MoE sizes must be positive");
    if (config.variant == Qwen35Variant::kQwen3Next) {
      // Qwen3-Next keeps Qwen2-MoE's knobs; Qwen3.5-MoE has MoE in every layer and renormalises.
      config.norm_topk_prob = text.get_bool("norm_topk_prob", true);
      config.decoder_sparse_step = text.get_int("decoder_sparse_step", 1);
      VT_CHECK(config.decoder_sparse_step > 0, text.where(), ".decoder_sparse_step must be positive");
      if (text.has("mlp_only_layers")) config.mlp_only_layers = text.get_ints("mlp_only_layers");
    }
  }
  bool needs_dense_mlp = config.num_experts == 0;
  for (int64_t i = 0; i < config.num_layers; ++i) needs_dense_mlp |= !config.layer_is_moe(i);
  if (needs_dense_mlp)
    VT_CHECK(config.intermediate_size > 0, text.where(), ".intermediate_size is required");

  parse_quantization(root, config);
  if (!config.fp8 && info->vision_layout) parse_quantization(text, config);
  return config;
}

}  // namespace vt
