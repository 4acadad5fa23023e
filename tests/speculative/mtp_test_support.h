// Pieces the MTP tests of the CPU reference and of the CUDA model share: random `mtp.*` tensors
// for a golden config, named and shaped as Qwen3.5 / Qwen3-Next checkpoints ship them, and a
// scratch copy of a golden checkpoint with them appended (f32, or the linears as FP8 E4M3 with
// 128x128 block scales as FP8 checkpoints ship them).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../unit/checkpoint_fixture.h"
#include "core/dtype.h"
#include "io/json_config.h"
#include "io/weight_store.h"
#include "model/generate.h"
#include "model/linear.h"
#include "models/qwen3_5/model.h"

namespace vt::testing {

// name -> (shape, f32 values)
using Tensors = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>;

inline Qwen35Config golden_config(const std::string& name) {
  return parse_qwen35_config(std::string(VT_SOURCE_DIR) + "/tests/golden/" + name +
                             "/config.json");
}

// Prompt `index` of a golden case (the FP8 case's W8A8 prompts).
inline std::vector<int32_t> golden_prompt(const std::string& name, int index) {
  const auto reference =
      read_json_file(std::string(VT_SOURCE_DIR) + "/tests/golden/" + name + "/reference.json");
  const auto& prompts = reference.contains("prompts") ? reference["prompts"]
                                                      : reference["modes"]["w8a8"]["prompts"];
  return prompts[index]["ids"].get<std::vector<int32_t>>();
}

// Random f32 MTP tensors for `config`, named and shaped as Qwen3.5 / Qwen3-Next checkpoints ship.
inline Tensors random_mtp_tensors(const Qwen35Config& c, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensors tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    std::uniform_real_distribution<float> uniform(-scale, scale);
    std::vector<float> values(static_cast<size_t>(count));
    for (float& v : values) v = uniform(rng);
    tensors["mtp." + name] = {std::move(shape), std::move(values)};
  };
  const int64_t H = c.hidden_size, D = c.head_dim;
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    add(name, {rows, cols}, 1.7f / std::sqrt(float(cols)));
  };
  for (const char* norm : {"pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm",
                           "layers.0.input_layernorm", "layers.0.post_attention_layernorm"})
    add(std::string(norm) + ".weight", {H}, 0.3f);
  matrix("fc.weight", H, 2 * H);
  const std::string a = "layers.0.self_attn.";
  matrix(a + "q_proj.weight", c.num_heads * D * 2, H);
  matrix(a + "k_proj.weight", c.num_kv_heads * D, H);
  matrix(a + "v_proj.weight", c.num_kv_heads * D, H);
  matrix(a + "o_proj.weight", H, c.num_heads * D);
  add(a + "q_norm.weight", {D}, 0.3f);
  add(a + "k_norm.weight", {D}, 0.3f);
  auto mlp = [&](const std::string& p, int64_t inter) {
    matrix(p + "gate_proj.weight", inter, H);
    matrix(p + "up_proj.weight", inter, H);
    matrix(p + "down_proj.weight", H, inter);
  };
  if (c.layer_is_moe(0)) {
    matrix("layers.0.mlp.gate.weight", c.num_experts, H);
    for (int64_t e = 0; e < c.num_experts; ++e)
      mlp("layers.0.mlp.experts." + std::to_string(e) + ".", c.moe_intermediate_size);
    mlp("layers.0.mlp.shared_expert.", c.shared_expert_intermediate_size);
    matrix("layers.0.mlp.shared_expert_gate.weight", 1, H);
  } else {
    mlp("layers.0.mlp.", c.intermediate_size);
  }
  return tensors;
}

// An MTP head for a golden case that predicts the target's greedy tokens after `prompts`: the
// decoder layer silenced (o_proj and every down_proj zero, so its output is fc's), the pre-fc and
// output norms' weights zero (plain RMSNorms), and fc fitted, minimum-norm least squares (exact:
// fewer pairs than its 2H inputs), so that fc(z_p) = h_{p+1} for every pair p of the greedy
// continuations of `new_tokens` tokens, z_p = [rmsnorm(embed(x_{p+1})) | rmsnorm(h_p)], h the
// target's lm_head inputs. The head's output rmsnorm(fc(z_p)) is h_{p+1} up to scale, so its
// logits pick the target's token at p + 2: for the pairs from the target's hidden states and,
// rmsnorm ignoring scale, for chained pairs on its own output too. Drafts along the greedy path
// are accepted; a hidden state from the wrong position or a stale one shows as rejections.
inline Tensors fitted_mtp_tensors(const std::string& golden_case,
                                  const std::vector<std::vector<int32_t>>& prompts,
                                  int64_t new_tokens, uint32_t seed) {
  const std::string dir = std::string(VT_SOURCE_DIR) + "/tests/golden/" + golden_case;
  const Qwen35Config c = golden_config(golden_case);
  const int64_t H = c.hidden_size, V = c.vocab_size;
  Tensors tensors = random_mtp_tensors(c, seed);
  for (auto& [name, tensor] : tensors) {
    const bool silenced = name.find("o_proj") != std::string::npos ||
                          name.find("down_proj") != std::string::npos;
    const bool plain_norm = name == "mtp.pre_fc_norm_embedding.weight" ||
                            name == "mtp.pre_fc_norm_hidden.weight" || name == "mtp.norm.weight";
    if (silenced || plain_norm) std::fill(tensor.second.begin(), tensor.second.end(), 0.0f);
  }
  Qwen35Model target(dir, {});
  WeightStore store = WeightStore::open(dir);
  const Buffer embed = load_f32(store, c.weight_prefix + "embed_tokens.weight", {V, H});
  const auto rms_normed = [&](const float* x) {
    double squares = 0;
    for (int64_t i = 0; i < H; ++i) squares += double(x[i]) * x[i];
    const double inverse = 1.0 / std::sqrt(squares / double(H) + c.rms_norm_eps);
    std::vector<double> y(static_cast<size_t>(H));
    for (int64_t i = 0; i < H; ++i) y[i] = x[i] * inverse;
    return y;
  };
  std::vector<std::vector<double>> inputs, outputs;  // z_p [2H], h_{p+1} [H]
  target.set_keep_hidden_states(true);
  for (const auto& prompt : prompts) {
    GenerateOptions options;
    options.max_new_tokens = new_tokens;
    std::vector<int32_t> ids = prompt;
    const auto generated = generate(target, prompt, options).output_ids;
    ids.insert(ids.end(), generated.begin(), generated.end());
    const int64_t P = int64_t(prompt.size()), L = int64_t(ids.size());
    auto state = target.new_sequence(L);
    Buffer logits(DType::kF32, {1, V});
    target.forward(std::span<const int32_t>(ids).first(size_t(L - 1)), *state, logits, {});
    const TensorView hidden = target.last_hidden_states();  // h_0 .. h_{L-2}
    // The drafts follow the pair at P - 1 (the prefill, then the first token) and later ones.
    for (int64_t p = P - 1; p + 2 < L; ++p) {
      std::vector<double> z = rms_normed(embed.f32() + int64_t(ids[p + 1]) * H);
      const std::vector<double> h = rms_normed(hidden.f32() + p * H);
      z.insert(z.end(), h.begin(), h.end());
      inputs.push_back(std::move(z));
      outputs.emplace_back(hidden.f32() + (p + 1) * H, hidden.f32() + (p + 2) * H);
    }
  }
  // W = Y^T (Z Z^T)^-1 Z: solve the Gram system G A = Y (Gaussian elimination, partial pivoting).
  const int64_t N = int64_t(inputs.size()), K = 2 * H;
  std::vector<std::vector<double>> gram(size_t(N), std::vector<double>(size_t(N + H)));
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) gram[i][j] += inputs[i][k] * inputs[j][k];
    for (int64_t o = 0; o < H; ++o) gram[i][N + o] = outputs[i][o];
  }
  for (int64_t col = 0; col < N; ++col) {
    int64_t pivot = col;
    for (int64_t r = col + 1; r < N; ++r)
      if (std::fabs(gram[r][col]) > std::fabs(gram[pivot][col])) pivot = r;
    std::swap(gram[col], gram[pivot]);
    for (int64_t r = 0; r < N; ++r) {
      if (r == col) continue;
      const double factor = gram[r][col] / gram[col][col];
      for (int64_t j = col; j < N + H; ++j) gram[r][j] -= factor * gram[col][j];
    }
  }
  std::vector<float>& fc = tensors.at("mtp.fc.weight").second;  // [H, 2H]
  for (int64_t o = 0; o < H; ++o)
    for (int64_t k = 0; k < K; ++k) {
      double sum = 0;
      for (int64_t i = 0; i < N; ++i) sum += gram[i][N + o] / gram[i][i] * inputs[i][k];
      fc[o * K + k] = float(sum);
    }
  return tensors;
}

// A scratch copy of a golden checkpoint with `tensors` appended to model.safetensors: f32, or with
// fp8_linears the projections (fc and every *_proj) as E4M3 codes with 128x128 block scales
// (`weight_scale_inv`, dequantised = code x scale of its block; scale = block absmax / 448), as
// FP8 checkpoints ship them; norms and gates stay f32.
class MtpCheckpoint {
 public:
  MtpCheckpoint(const std::string& golden_case, const Tensors& tensors, bool fp8_linears = false)
      : scratch_(golden_case) {
    std::string data;  // filled by the edit, then appended (edit_header takes it by reference)
    scratch_.edit_header(
        "model.safetensors",
        [&](nlohmann::json& header) {
          size_t end = 0;
          for (const auto& [name, entry] : header.items())
            if (name != "__metadata__") end = std::max(end, entry["data_offsets"][1].get<size_t>());
          const auto append = [&](const std::string& name, const char* dtype,
                                  const std::vector<int64_t>& shape, const std::string& bytes) {
            const size_t begin = end + data.size();
            data += bytes;
            header[name] = {
                {"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end + data.size()}}};
          };
          for (const auto& [name, tensor] : tensors) {
            const auto& [shape, values] = tensor;
            if (fp8_linears && is_linear(name) && shape.size() == 2) {
              std::string codes, scales;
              quantize_blocks(shape[0], shape[1], values, &codes, &scales);
              append(name, "F8_E4M3", shape, codes);
              append(name + "_scale_inv", "F32", {(shape[0] + 127) / 128, (shape[1] + 127) / 128},
                     scales);
              continue;
            }
            append(name, "F32", shape,
                   std::string(reinterpret_cast<const char*>(values.data()),
                               values.size() * sizeof(float)));
          }
        },
        data);
  }
  const std::string& dir() const { return scratch_.dir(); }

 private:
  static bool is_linear(const std::string& name) {
    const std::string suffix = "_proj.weight";
    return name == "mtp.fc.weight" ||
           (name.size() > suffix.size() &&
            name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0);
  }
  // values [rows, cols] -> e4m3 codes [rows, cols] and f32 scales [ceil(rows/128), ceil(cols/128)].
  static void quantize_blocks(int64_t rows, int64_t cols, const std::vector<float>& values,
                              std::string* codes, std::string* scales) {
    const int64_t block_rows = (rows + 127) / 128, block_cols = (cols + 127) / 128;
    codes->assign(size_t(rows * cols), '\0');
    std::vector<float> block_scale(size_t(block_rows * block_cols));
    for (int64_t br = 0; br < block_rows; ++br)
      for (int64_t bc = 0; bc < block_cols; ++bc) {
        float absmax = 0;
        for (int64_t r = br * 128; r < std::min(rows, br * 128 + 128); ++r)
          for (int64_t k = bc * 128; k < std::min(cols, bc * 128 + 128); ++k)
            absmax = std::max(absmax, std::fabs(values[r * cols + k]));
        const float scale = std::max(absmax, 1e-10f) / 448.0f;
        block_scale[br * block_cols + bc] = scale;
        for (int64_t r = br * 128; r < std::min(rows, br * 128 + 128); ++r)
          for (int64_t k = bc * 128; k < std::min(cols, bc * 128 + 128); ++k)
            (*codes)[size_t(r * cols + k)] = char(f32_to_f8e4m3(values[r * cols + k] / scale));
      }
    scales->assign(reinterpret_cast<const char*>(block_scale.data()),
                   block_scale.size() * sizeof(float));
  }

  ScratchCheckpoint scratch_;
};

}  // namespace vt::testing
