// The MoE CPU references (ops/moe/moe_cpu.cpp): router top-k with ties, renormalised or not; the
// expert-grouped layout; the FP8 expert GEMV against dequantise-then-multiply; the combine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "../numerics.h"
#include "core/error.h"
#include "op_test_support.h"
#include "ops/moe/moe.h"
#include "ops/ops.h"

namespace vt {
namespace {

TEST(Moe, MoeRouteRenormalisesTopK) {
  Buffer logits(DType::kF32, {1, 4}), weights(DType::kF32, {1, 2}), ids(DType::kI32, {1, 2});
  float values[4] = {0.0f, 2.0f, 1.0f, 2.0f};
  std::copy(values, values + 4, logits.f32());
  ops::moe_route(ids, weights, logits, true);
  EXPECT_EQ(ids.view().as<int32_t>()[0], 1);  // tie broken towards the lower id
  EXPECT_EQ(ids.view().as<int32_t>()[1], 3);
  EXPECT_NEAR(weights.f32()[0], 0.5f, 1e-6);
  ops::moe_route(ids, weights, logits, false);
  double total = std::exp(0.0) + 2 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(weights.f32()[0], std::exp(2.0) / total, 1e-6);
}

// 3 tokens, top 2 of 6 experts: token 0 {0, 1}, token 1 {1, 4}, token 2 {4, 5}: experts 1 and 4
// chosen by two tokens, 0 and 5 by one, 2 and 3 by none.
TEST(Moe, MoeGroupListsPairsByExpert) {
  const int64_t tokens = 3, experts = 6, top_k = 2;
  std::vector<int32_t> words(moe_routing_words(tokens, experts, top_k), -7);
  std::vector<float> weights(tokens * top_k);
  MoeRouting routing = moe_routing_in(words.data(), weights.data(), tokens, experts, top_k);
  const int32_t ids[] = {0, 1, 1, 4, 4, 5};
  std::copy(ids, ids + 6, routing.ids);
  cpu::moe_group(routing, tokens, experts, top_k);
  EXPECT_EQ(std::vector<int32_t>(routing.expert_offsets, routing.expert_offsets + experts + 1),
            (std::vector<int32_t>{0, 1, 3, 3, 3, 5, 6}));
  EXPECT_EQ(std::vector<int32_t>(routing.sorted_pairs, routing.sorted_pairs + 6),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(*routing.active_count, 4);
  EXPECT_EQ(std::vector<int32_t>(routing.active_experts, routing.active_experts + 4),
            (std::vector<int32_t>{0, 1, 4, 5}));
}

// Pairs out of expert order: within an expert they stay in pair order.
TEST(Moe, MoeGroupKeepsPairOrderWithinExpert) {
  const int64_t tokens = 4, experts = 8, top_k = 2;
  std::vector<int32_t> words(moe_routing_words(tokens, experts, top_k));
  std::vector<float> weights(tokens * top_k);
  MoeRouting routing = moe_routing_in(words.data(), weights.data(), tokens, experts, top_k);
  const int32_t ids[] = {7, 2, 2, 7, 3, 7, 7, 2};
  std::copy(ids, ids + 8, routing.ids);
  cpu::moe_group(routing, tokens, experts, top_k);
  EXPECT_EQ(std::vector<int32_t>(routing.sorted_pairs, routing.sorted_pairs + 8),
            (std::vector<int32_t>{1, 2, 7, 4, 0, 3, 5, 6}));
  EXPECT_EQ(*routing.active_count, 3);
  EXPECT_EQ(routing.expert_offsets[8], 8);
}

// The FP8 reference equals dequantise (codes x block scales) then the f32 GEMV, up to where the
// scales are applied (per block vs per element): two fp32 paths (kSamePathRelL2).
TEST(Moe, MoeExpertGemvFp8MatchesDequantised) {
  const int64_t tokens = 3, experts = 4, top_k = 2, pairs = tokens * top_k, n = 136, k = 272;
  const int64_t n_blocks = 2, k_blocks = 3;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 60.0f);
  std::uniform_real_distribution<float> uniform(1e-3f, 2e-3f);
  std::vector<uint8_t> w(experts * n * k), x(tokens * k);
  for (auto& c : w) c = f32_to_f8e4m3(normal(rng));
  for (auto& c : x) c = f32_to_f8e4m3(normal(rng));
  std::vector<float> w_scales(experts * n_blocks * k_blocks), x_scales(tokens * k_blocks);
  for (auto& s : w_scales) s = uniform(rng);
  for (auto& s : x_scales) s = uniform(rng);
  const std::vector<int32_t> ids = {3, 0, 0, 1, 3, 2};
  std::vector<float> w_f32(w.size()), x_f32(x.size());
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < k; ++i)
        w_f32[(e * n + r) * k + i] = f8e4m3_to_f32(w[(e * n + r) * k + i]) *
                                     w_scales[(e * n_blocks + r / 128) * k_blocks + i / 128];
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < k; ++i)
      x_f32[t * k + i] = f8e4m3_to_f32(x[t * k + i]) * x_scales[t * k_blocks + i / 128];
  std::vector<float> got(pairs * n), expected(pairs * n);
  cpu::moe_expert_gemv_fp8(got.data(), x.data(), x_scales.data(), ids.data(), w.data(),
                           w_scales.data(), pairs, n, k, top_k);
  cpu::moe_expert_gemv(expected.data(), x_f32.data(), ids.data(), w_f32.data(), pairs, n, k, top_k);
  EXPECT_LE(testing::relative_l2(got.data(), expected.data(), pairs * n), numerics::kSamePathRelL2);
}

TEST(Moe, MoeCombineWeightsPairsAndGatesShared) {
  const float expert_out[] = {1, 2, 10, 20, 3, 4, 30, 40};  // 2 tokens x 2 pairs x hidden 2
  const float weights[] = {0.5f, 0.25f, 1.0f, 2.0f}, shared[] = {4, 8, 1, 1},
              gate[] = {0.0f, 100.0f};
  float out[4];
  cpu::moe_combine(out, expert_out, weights, shared, gate, 2, 2, 2);
  EXPECT_FLOAT_EQ(out[0], 0.5f * 1 + 0.25f * 10 + 0.5f * 4);  // sigmoid(0) = 1/2
  EXPECT_FLOAT_EQ(out[1], 0.5f * 2 + 0.25f * 20 + 0.5f * 8);
  EXPECT_FLOAT_EQ(out[2], 3 + 2 * 30 + 1.0f);
  cpu::moe_combine(out, expert_out, weights, nullptr, nullptr, 2, 2, 2);
  EXPECT_FLOAT_EQ(out[3], 4 + 2 * 40);
}

// The shared expert folded in as expert E (the CUDA forward's shape when its width is the routed
// experts'): logits [T, E + 1] give the unfolded routing plus pair k = (E, sigmoid(logit E)), and
// the combine over those k + 1 pairs is bit-identical to the routed sum plus the gated shared
// expert (the same additions in the same order).
TEST(Moe, MoeRouteFoldsSharedExpertAsLastPair) {
  const int64_t tokens = 5, experts = 6, top_k = 2, hidden = 3;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(tokens * (experts + 1)), routed_logits, gate(tokens);
  for (auto& v : logits) v = normal(rng);
  for (int64_t t = 0; t < tokens; ++t) {
    routed_logits.insert(routed_logits.end(), logits.begin() + t * (experts + 1),
                         logits.begin() + t * (experts + 1) + experts);
    gate[t] = logits[t * (experts + 1) + experts];
  }
  for (bool renormalize : {true, false}) {
    std::vector<int32_t> ids(tokens * top_k), folded_ids(tokens * (top_k + 1));
    std::vector<float> weights(tokens * top_k), folded_weights(tokens * (top_k + 1));
    cpu::moe_route(ids.data(), weights.data(), routed_logits.data(), tokens, experts, top_k, renormalize);
    cpu::moe_route(folded_ids.data(), folded_weights.data(), logits.data(), tokens, experts, top_k, renormalize,
                   true);
    std::vector<float> expert_out(tokens * top_k * hidden), shared(tokens * hidden),
        folded_out(tokens * (top_k + 1) * hidden);
    for (auto& v : expert_out) v = normal(rng);
    for (auto& v : shared) v = normal(rng);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < top_k; ++j) {
        EXPECT_EQ(folded_ids[t * (top_k + 1) + j], ids[t * top_k + j]);
        EXPECT_EQ(folded_weights[t * (top_k + 1) + j], weights[t * top_k + j]);
        std::copy_n(&expert_out[(t * top_k + j) * hidden], hidden, &folded_out[(t * (top_k + 1) + j) * hidden]);
      }
      EXPECT_EQ(folded_ids[t * (top_k + 1) + top_k], experts);
      EXPECT_EQ(folded_weights[t * (top_k + 1) + top_k], 1.0f / (1.0f + std::exp(-gate[t])));
      std::copy_n(&shared[t * hidden], hidden, &folded_out[(t * (top_k + 1) + top_k) * hidden]);
    }
    std::vector<float> unfolded(tokens * hidden), folded(tokens * hidden);
    cpu::moe_combine(unfolded.data(), expert_out.data(), weights.data(), shared.data(), gate.data(), tokens, hidden,
                     top_k);
    cpu::moe_combine(folded.data(), folded_out.data(), folded_weights.data(), nullptr, nullptr, tokens, hidden,
                     top_k + 1);
    EXPECT_EQ(folded, unfolded);
  }
}

}  // namespace
}  // namespace vt
