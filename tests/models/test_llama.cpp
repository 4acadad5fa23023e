// The Llama model from GGUF: llama.cpp's q/k row permutation undone (checked against RoPE
// algebra and against HF on a tiny random checkpoint written as llama.cpp's converter writes it).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "../numerics.h"
#include "model/generate.h"
#include "models/llama/model.h"
#include "models/registry.h"
#include "ops/ops.h"

namespace vt {
namespace {

// llama.cpp convert_hf_to_gguf.py LlamaModel.permute: within each head, HF row s*half + j goes
// to row 2j + s, so that GPT-J style RoPE (adjacent pairs) computes what HF's NeoX halves do.
Buffer llama_cpp_permute(const Buffer& weight, int64_t heads) {
  const int64_t rows = weight.shape()[0], columns = weight.shape()[1], half = rows / heads / 2;
  Buffer out(DType::kF32, weight.shape());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t j = 0; j < half; ++j)
        for (int64_t c = 0; c < columns; ++c)
          out.f32()[(h * 2 * half + 2 * j + s) * columns + c] = weight.f32()[(h * 2 * half + s * half + j) * columns + c];
  return out;
}

Buffer random_matrix(int64_t rows, int64_t columns, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  Buffer out(DType::kF32, {rows, columns});
  for (int64_t i = 0; i < out.numel(); ++i) out.f32()[i] = normal(rng);
  return out;
}

TEST(Llama, UnpermuteUndoesTheConverterPermutation) {
  for (int64_t heads : {1, 3, 9}) {
    Buffer hf = random_matrix(heads * 8, 5, 11);
    Buffer stored = llama_cpp_permute(hf, heads);
    Buffer restored = unpermute_rope_rows(stored, heads);
    for (int64_t i = 0; i < hf.numel(); ++i) ASSERT_EQ(restored.f32()[i], hf.f32()[i]) << heads << " heads";
  }
}

// GPT-J ("normal" in llama.cpp) RoPE: rotates adjacent pairs (2j, 2j+1) by pos * theta^(-2j/D).
void rope_interleaved(float* head, int64_t d, int64_t position, float theta) {
  for (int64_t j = 0; j < d / 2; ++j) {
    const float angle = float(position) * (1.0f / std::pow(theta, float(2 * j) / float(d)));
    const float x0 = head[2 * j], x1 = head[2 * j + 1];
    head[2 * j] = x0 * std::cos(angle) - x1 * std::sin(angle);
    head[2 * j + 1] = x1 * std::cos(angle) + x0 * std::sin(angle);
  }
}

// llama.cpp's path (stored weights, interleaved RoPE) and vt's (unpermuted weights, NeoX RoPE)
// give the same rotated vectors up to the row order, hence the same attention scores.
TEST(Llama, NeoxRopeOnUnpermutedRowsEqualsInterleavedRopeOnStoredRows) {
  const int64_t heads = 3, d = 16, hidden = 24, tokens = 5;
  const float theta = 100000.0f;
  Buffer hf = random_matrix(heads * d, hidden, 5);
  Buffer x = random_matrix(tokens, hidden, 6);
  Buffer stored = llama_cpp_permute(hf, heads);
  Buffer unpermuted = unpermute_rope_rows(stored, heads);

  Buffer q_stored(DType::kF32, {tokens, heads * d}), q_vt(DType::kF32, {tokens, heads * d});
  ops::matmul_nt(q_stored, x, stored);
  ops::matmul_nt(q_vt, x, unpermuted);
  Buffer positions(DType::kI64, {tokens});
  for (int64_t t = 0; t < tokens; ++t) positions.view().as<int64_t>()[t] = 7 + 3 * t;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h) rope_interleaved(q_stored.f32() + (t * heads + h) * d, d, 7 + 3 * t, theta);
  ops::rope_neox(q_vt.view().reshape({tokens, heads, d}), positions, d, Rope{theta});

  const int64_t half = d / 2;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < half; ++j)
        for (int64_t s = 0; s < 2; ++s) {
          const float interleaved = q_stored.f32()[(t * heads + h) * d + 2 * j + s];
          const float neox = q_vt.f32()[(t * heads + h) * d + s * half + j];
          ASSERT_NEAR(neox, interleaved, 1e-4f * (1.0f + std::abs(interleaved))) << t << " " << h << " " << j;
        }
}

const std::string kFixtures = std::string(VT_SOURCE_DIR) + "/tests/golden/gguf/";

// A tiny random Llama written as llama.cpp writes it; the reference is HF on the original weights.
TEST(Llama, TinyGgufMatchesHfOnTheOriginalWeights) {
  std::ifstream in(kFixtures + "tiny_llama.json");
  ASSERT_TRUE(in);
  nlohmann::json reference = nlohmann::json::parse(in);
  auto ids = reference["ids"].get<std::vector<int32_t>>();
  auto expected = reference["logits"].get<std::vector<std::vector<float>>>();

  auto model = load_model(kFixtures + "tiny_llama.gguf", {});
  EXPECT_EQ(model->info().architecture, "llama");
  const int64_t vocab = model->info().vocab_size, length = int64_t(ids.size());
  ASSERT_EQ(vocab, int64_t(expected[0].size()));
  auto state = model->new_sequence(length);
  Buffer logits(DType::kF32, {length, vocab});
  ForwardOptions options;
  options.all_logits = true;
  model->forward(ids, *state, logits, options);
  double difference = 0, norm = 0;
  for (int64_t t = 0; t < length; ++t)
    for (int64_t v = 0; v < vocab; ++v) {
      const double want = expected[t][v];
      difference += (logits.f32()[t * vocab + v] - want) * (logits.f32()[t * vocab + v] - want);
      norm += want * want;
    }
  // The reference logits are written with 6 decimals: the bound covers that rounding too.
  EXPECT_LE(std::sqrt(difference / norm), numerics::kLogitsRelL2);

  GenerateOptions generate_options;
  generate_options.max_new_tokens = int64_t(reference["greedy_ids"].size());
  EXPECT_EQ(generate(*model, ids, generate_options).output_ids, reference["greedy_ids"].get<std::vector<int32_t>>());
}

TEST(Llama, DescribeNamesTheArchitecture) {
  auto model = load_model(kFixtures + "tiny_llama.gguf", {});
  const std::string text = model->describe();
  EXPECT_NE(text.find("architecture: llama"), std::string::npos) << text;
  EXPECT_NE(text.find("tied embeddings no"), std::string::npos) << text;
}

TEST(Llama, NotALlamaGgufIsAnError) {
  try {
    load_model(kFixtures + "quants.gguf", {});
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("general.architecture"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace vt
