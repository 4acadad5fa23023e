// The attention CPU reference (ops/attention/attention_cpu.cpp) against a double-precision
// softmax, partial RoPE, and the prefill kernel's work plan (ops/attention/prefill_plan.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "ops/attention/prefill_plan.h"
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
  ops::rope_neox(x, positions, 4, Rope{10000.0f});
  for (int i = 0; i < 8; ++i) EXPECT_EQ(x.f32()[i], original.f32()[i]);  // position 0: identity
  for (int i = 4; i < 8; ++i) EXPECT_EQ(x.f32()[8 + i], original.f32()[8 + i]);
  double angle = 3.0 / std::pow(10000.0, 2.0 / 4);  // pair (1, 3)
  EXPECT_NEAR(x.f32()[8 + 1], original.f32()[8 + 1] * std::cos(angle) - original.f32()[8 + 3] * std::sin(angle), 1e-5);
}

// Every (query tile, head, sequence) planned exactly once with its sequence's fields, the CTAs'
// ranges covering the work items in order, the load balanced (no CTA more than one item's cost
// above the lightest), and the same plan again for the same step.
TEST(Attention, PrefillPlanCoversEveryTileOnce) {
  const int64_t heads = 6, ctas = 7, max_blocks = 40;
  const std::vector<cuda::PrefillSequence> sequences = {
      {0, 1, 1, 3}, {1, 300, 400, 0}, {301, 128, 128, 2}, {429, 129, 1000, 1}};
  cuda::PrefillAttentionPlan plan(heads, ctas, 600, 5);
  plan.plan(sequences.data(), int64_t(sequences.size()), max_blocks);
  const std::vector<int32_t> first = plan.packed();
  using P = cuda::PrefillAttentionPlan;
  const auto field = [&](P::Field f, int64_t work) { return first[size_t(plan.offset(f) + work)]; };
  EXPECT_EQ(plan.works(), heads * (1 + 3 + 1 + 2));
  EXPECT_EQ(plan.tokens(), 1 + 300 + 128 + 129);
  EXPECT_EQ(first[0], 0);
  EXPECT_EQ(first[size_t(ctas)], plan.works());
  std::set<std::tuple<int, int, int>> seen;
  std::vector<int64_t> cost(ctas, 0);
  for (int64_t c = 0; c < ctas; ++c) {
    ASSERT_LE(first[size_t(c)], first[size_t(c + 1)]);
    for (int64_t work = first[size_t(c)]; work < first[size_t(c + 1)]; ++work) {
      const int s = field(P::kSequence, work);
      ASSERT_GE(s, 0);
      ASSERT_LT(s, int(sequences.size()));
      const cuda::PrefillSequence& sequence = sequences[size_t(s)];
      EXPECT_EQ(field(P::kQOffset, work), sequence.first_token);
      EXPECT_EQ(field(P::kQLen, work), sequence.num_tokens);
      EXPECT_EQ(field(P::kKvLen, work), sequence.num_keys);
      EXPECT_EQ(field(P::kKvOffset, work), sequence.slot * max_blocks);
      EXPECT_LT(field(P::kQTile, work) * cuda::kPrefillTileQ, sequence.num_tokens);
      EXPECT_TRUE(seen.insert({field(P::kQTile, work), field(P::kHead, work), s}).second) << "work " << work;
      // The planner's cost: the keys the tile's last row sees (all of them for the last tile).
      const int64_t tile = field(P::kQTile, work), tiles = (sequence.num_tokens + cuda::kPrefillTileQ - 1) / cuda::kPrefillTileQ;
      const int64_t keys = tile + 1 == tiles ? sequence.num_keys
                                             : std::min<int64_t>(sequence.num_keys - sequence.num_tokens +
                                                                     (tile + 1) * cuda::kPrefillTileQ,
                                                                 sequence.num_keys);
      cost[size_t(c)] += 2 * cuda::kPrefillTileQ + keys;
    }
  }
  EXPECT_EQ(int64_t(seen.size()), plan.works());
  EXPECT_LE(*std::max_element(cost.begin(), cost.end()) - *std::min_element(cost.begin(), cost.end()),
            2 * cuda::kPrefillTileQ + 1000);
  plan.plan(sequences.data(), int64_t(sequences.size()), max_blocks);
  EXPECT_EQ(plan.packed(), first);
  plan.plan(nullptr, 0, max_blocks);
  EXPECT_EQ(plan.works(), 0);
}

}  // namespace
}  // namespace vt
