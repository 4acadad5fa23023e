// The Gated DeltaNet CPU reference (ops/gdn/gdn_cpu.cpp) against a double-precision formula and
// against itself where two paths compute the same function (chunked vs recurrent delta rule, split
// vs whole causal conv).
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "../numerics.h"
#include "core/error.h"
#include "ops/ops.h"
#include "op_test_support.h"

namespace vt {
namespace {

using testing::random;
using testing::copy;
using testing::relative_l2;


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

TEST(Gdn, ChunkedDeltaRuleEqualsRecurrent) {
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

TEST(Gdn, RecurrentDeltaRuleMatchesDoubleFormula) {
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

TEST(Gdn, ConvWithStateEqualsWholeSequence) {
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

}  // namespace
}  // namespace vt
