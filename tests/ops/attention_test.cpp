// The attention CPU reference (ops/attention/attention_cpu.cpp) against a double-precision
// softmax, and partial RoPE.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"
#include "op_test_support.h"

namespace vt {
namespace {

using testing::random;
using testing::copy;

TEST(Attention, AttentionMatchesDoubleSoftmax) {
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

TEST(Attention, RopeRotatesOnlyTheRotaryDims) {
  Buffer x = random({2, 1, 8}, 11), original = copy(x), positions(DType::kI64, {2});
  positions.view().as<int64_t>()[0] = 0;
  positions.view().as<int64_t>()[1] = 3;
  ops::rope_neox(x, positions, 4, 10000.0f);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(x.f32()[i], original.f32()[i]);  // position 0: identity
  for (int i = 4; i < 8; ++i) EXPECT_EQ(x.f32()[8 + i], original.f32()[8 + i]);
  double angle = 3.0 / std::pow(10000.0, 2.0 / 4);  // pair (1, 3)
  EXPECT_NEAR(x.f32()[8 + 1], original.f32()[8 + 1] * std::cos(angle) - original.f32()[8 + 3] * std::sin(angle), 1e-5);
}

}  // namespace
}  // namespace vt
