// The CPU reference ops against plain double-precision formulas, and against each other where
// two paths compute the same function (chunked vs recurrent delta rule, split vs whole conv).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "../numerics.h"
#include "core/error.h"
#include "ops/ops.h"

namespace vt {
namespace {

Buffer random(const Shape& shape, uint64_t seed, float scale = 1.0f) {
  Buffer buffer(DType::kF32, shape);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  for (int64_t i = 0; i < buffer.numel(); ++i) buffer.f32()[i] = normal(rng);
  return buffer;
}

Buffer copy(const Buffer& source) {
  Buffer out(source.view().dtype, source.shape());
  std::copy(source.f32(), source.f32() + source.numel(), out.f32());
  return out;
}

double relative_l2(const float* a, const float* b, int64_t count) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < count; ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

struct DeltaRuleInputs {
  Buffer q, k, v, g, beta;
};

DeltaRuleInputs delta_rule_inputs(int64_t tokens, int64_t hk, int64_t hv, int64_t dk, int64_t dv, uint64_t seed) {
  DeltaRuleInputs in{random({tokens, hk, dk}, seed), random({tokens, hk, dk}, seed + 1),
                     random({tokens, hv, dv}, seed + 2), random({tokens, hv}, seed + 3),
                     random({tokens, hv}, seed + 4)};
  ops::l2_normalize(in.q, 1e-6f);
  ops::l2_normalize(in.k, 1e-6f);
  for (int64_t i = 0; i < in.g.numel(); ++i) {
    in.g.f32()[i] = -std::log1p(std::exp(in.g.f32()[i])) * 0.5f;  // log-decay <= 0
    in.beta.f32()[i] = 1.0f / (1.0f + std::exp(-in.beta.f32()[i]));
  }
  return in;
}

TEST(CpuOps, ChunkedDeltaRuleEqualsRecurrent) {
  const int64_t hk = 2, hv = 4, dk = 16, dv = 24;
  for (int64_t tokens : {1, 5, 63, 64, 65, 150}) {
    for (int64_t chunk : {16, 64}) {
      auto in = delta_rule_inputs(tokens, hk, hv, dk, dv, 100 + tokens);
      Buffer initial = random({hv, dk, dv}, 7, 0.1f);
      Buffer state_a = copy(initial), state_b = copy(initial);
      Buffer out_a(DType::kF32, {tokens, hv, dv}), out_b(DType::kF32, {tokens, hv, dv});
      ops::gated_delta_rule(out_a, in.q, in.k, in.v, in.g, in.beta, state_a, ops::DeltaRuleMode::kRecurrent);
      ops::gated_delta_rule(out_b, in.q, in.k, in.v, in.g, in.beta, state_b, ops::DeltaRuleMode::kChunked, chunk);
      EXPECT_LE(relative_l2(out_b.f32(), out_a.f32(), out_a.numel()), numerics::kSamePathRelL2)
          << "tokens " << tokens << " chunk " << chunk;
      EXPECT_LE(relative_l2(state_b.f32(), state_a.f32(), state_a.numel()), numerics::kSamePathRelL2)
          << "tokens " << tokens << " chunk " << chunk;
    }
  }
}

TEST(CpuOps, RecurrentDeltaRuleMatchesDoubleFormula) {
  const int64_t tokens = 9, hk = 1, hv = 2, dk = 4, dv = 3;
  auto in = delta_rule_inputs(tokens, hk, hv, dk, dv, 5);
  Buffer state(DType::kF32, {hv, dk, dv}), out(DType::kF32, {tokens, hv, dv});
  ops::gated_delta_rule(out, in.q, in.k, in.v, in.g, in.beta, state, ops::DeltaRuleMode::kRecurrent);
  for (int64_t h = 0; h < hv; ++h) {
    std::vector<double> s(dk * dv, 0.0);
    for (int64_t t = 0; t < tokens; ++t) {
      const float* q = in.q.f32() + t * dk;  // one key head
      const float* k = in.k.f32() + t * dk;
      const float* v = in.v.f32() + (t * hv + h) * dv;
      double decay = std::exp(double(in.g.f32()[t * hv + h])), beta = in.beta.f32()[t * hv + h];
      for (auto& x : s) x *= decay;
      for (int64_t j = 0; j < dv; ++j) {
        double predicted = 0;
        for (int64_t i = 0; i < dk; ++i) predicted += s[i * dv + j] * k[i];
        double delta = beta * (v[j] - predicted);
        for (int64_t i = 0; i < dk; ++i) s[i * dv + j] += k[i] * delta;
      }
      for (int64_t j = 0; j < dv; ++j) {
        double o = 0;
        for (int64_t i = 0; i < dk; ++i) o += s[i * dv + j] * q[i];
        EXPECT_NEAR(out.f32()[(t * hv + h) * dv + j], o, 1e-5);
      }
    }
  }
}

TEST(CpuOps, ConvWithStateEqualsWholeSequence) {
  const int64_t tokens = 20, channels = 12, kernel = 4;
  Buffer x = random({tokens, channels}, 1), weight = random({channels, kernel}, 2);
  Buffer state_whole(DType::kF32, {channels, kernel - 1}), whole(DType::kF32, {tokens, channels});
  ops::causal_conv1d_silu(whole, x, state_whole, weight);
  Buffer state(DType::kF32, {channels, kernel - 1}), part(DType::kF32, {tokens, channels});
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 7}, {7, 8}, {8, 20}})
    ops::causal_conv1d_silu(part.view().rows(begin, end), x.view().rows(begin, end), state, weight);
  EXPECT_LE(relative_l2(part.f32(), whole.f32(), whole.numel()), 1e-7);
  EXPECT_LE(relative_l2(state.f32(), state_whole.f32(), state.numel()), 1e-7);
  // First output sees zeros before the sequence: silu(w[K-1] * x[0]).
  double pre = double(weight.f32()[kernel - 1]) * x.f32()[0];
  EXPECT_NEAR(whole.f32()[0], pre / (1 + std::exp(-pre)), 1e-6);
}

TEST(CpuOps, AttentionMatchesDoubleSoftmax) {
  const int64_t tokens = 5, start = 3, heads = 4, kv_heads = 2, dim = 8, capacity = 10;
  Buffer q = random({tokens, heads, dim}, 1), k = random({capacity, kv_heads, dim}, 2), v = random({capacity, kv_heads, dim}, 3);
  Buffer out(DType::kF32, {tokens, heads, dim});
  const float scale = 0.35f;
  ops::attention_causal(out, q, k, v, start, scale);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kv = h / (heads / kv_heads), visible = start + t + 1;
      std::vector<double> p(visible);
      double max_score = -1e300, sum = 0;
      for (int64_t s = 0; s < visible; ++s) {
        double dot = 0;
        for (int64_t d = 0; d < dim; ++d) dot += double(q.f32()[(t * heads + h) * dim + d]) * k.f32()[(s * kv_heads + kv) * dim + d];
        max_score = std::max(max_score, p[s] = dot * scale);
      }
      for (auto& x : p) sum += x = std::exp(x - max_score);
      for (int64_t d = 0; d < dim; ++d) {
        double expected = 0;
        for (int64_t s = 0; s < visible; ++s) expected += p[s] / sum * v.f32()[(s * kv_heads + kv) * dim + d];
        EXPECT_NEAR(out.f32()[(t * heads + h) * dim + d], expected, 1e-5);
      }
    }
  EXPECT_THROW(ops::attention_causal(out, q, k, v, 6, scale), Error);  // runs past the cache
}

TEST(CpuOps, RmsNormVariants) {
  Buffer x = random({3, 16}, 4), w = random({16}, 5), z = random({3, 16}, 6), out(DType::kF32, {3, 16});
  ops::rms_norm(out, x, w, 1e-6f, 1.0f);
  for (int64_t r = 0; r < 3; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < 16; ++i) ms += double(x.f32()[r * 16 + i]) * x.f32()[r * 16 + i] / 16;
    for (int64_t i = 0; i < 16; ++i)
      EXPECT_NEAR(out.f32()[r * 16 + i], x.f32()[r * 16 + i] / std::sqrt(ms + 1e-6) * (1.0 + w.f32()[i]), 1e-5);
  }
  ops::gated_rms_norm(out, x, z, w, 1e-6f);
  double ms = 0;
  for (int64_t i = 0; i < 16; ++i) ms += double(x.f32()[i]) * x.f32()[i] / 16;
  double gate = z.f32()[2];
  EXPECT_NEAR(out.f32()[2], w.f32()[2] * x.f32()[2] / std::sqrt(ms + 1e-6) * gate / (1 + std::exp(-gate)), 1e-5);
}

TEST(CpuOps, MatmulAndFp8Quantisation) {
  Buffer x = random({3, 300}, 8), w = random({5, 300}, 9), y(DType::kF32, {3, 5});
  ops::matmul_nt(y, x, w);
  double expected = 0;
  for (int64_t i = 0; i < 300; ++i) expected += double(x.f32()[300 + i]) * w.f32()[2 * 300 + i];
  EXPECT_NEAR(y.f32()[5 + 2], expected, 1e-4);

  Buffer quantized(DType::kF32, {3, 300});
  ops::fp8_quant_dequant(quantized, x, 128);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t g0 = 0; g0 < 300; g0 += 128) {
      float absmax = 0, qmax = 0;
      for (int64_t i = g0; i < std::min<int64_t>(300, g0 + 128); ++i) {
        absmax = std::max(absmax, std::fabs(x.f32()[r * 300 + i]));
        qmax = std::max(qmax, std::fabs(quantized.f32()[r * 300 + i]));
        // e4m3 keeps 3 mantissa bits: relative error <= 2^-4 for normal values.
        EXPECT_NEAR(quantized.f32()[r * 300 + i], x.f32()[r * 300 + i], absmax / 448 * 8 + std::fabs(x.f32()[r * 300 + i]) / 16);
      }
      EXPECT_NEAR(qmax, absmax, absmax * 1e-6);  // the group maximum maps to exactly 448
    }
}

TEST(CpuOps, MoeRouteRenormalisesTopK) {
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

TEST(CpuOps, RopeRotatesOnlyTheRotaryDims) {
  Buffer x = random({2, 1, 8}, 11), original = copy(x), positions(DType::kI64, {2});
  positions.view().as<int64_t>()[0] = 0;
  positions.view().as<int64_t>()[1] = 3;
  ops::rope_neox(x, positions, 4, 10000.0f);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(x.f32()[i], original.f32()[i]);  // position 0: identity
  for (int i = 4; i < 8; ++i) EXPECT_EQ(x.f32()[8 + i], original.f32()[8 + i]);
  double angle = 3.0 / std::pow(10000.0, 2.0 / 4);  // pair (1, 3)
  EXPECT_NEAR(x.f32()[8 + 1], original.f32()[8 + 1] * std::cos(angle) - original.f32()[8 + 3] * std::sin(angle), 1e-5);
}

TEST(CpuOps, EmbeddingRejectsOutOfRangeIds) {
  Buffer table = random({4, 3}, 1), ids(DType::kI32, {1}), out(DType::kF32, {1, 3});
  ids.view().as<int32_t>()[0] = 4;
  EXPECT_THROW(ops::embedding(out, ids, table), Error);
}

}  // namespace
}  // namespace vt
