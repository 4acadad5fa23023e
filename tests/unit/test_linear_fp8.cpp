// Linear::to_fp8_blocks: the output layer's FP8 quantisation for `--lm-head fp8` and `vt eval drift`.
// A row far smaller than its block's largest value is flushed to zero by a 128 x 128 block's scale
// and kept to e4m3's precision by a scale per row (and the same along a row for block columns);
// W8A8 or weight-only is what the Linear runs.
#include <gtest/gtest.h>

#include <cmath>

#include "model/linear.h"

namespace vt {
namespace {

Linear two_rows() {
  Buffer weight(DType::kF32, {2, 128});
  for (int64_t c = 0; c < 128; ++c) {
    weight.f32()[c] = std::sin(0.1f * float(c + 1));                // |w| up to 1
    weight.f32()[128 + c] = 1e-6f * std::cos(0.1f * float(c + 1));  // a million times smaller
  }
  return Linear::from_f32(std::move(weight), WeightFormat::kDense, false);
}

TEST(LinearFp8, BlockRowsSetTheScaleAndActivationsHowItRuns) {
  const Linear dense = two_rows();
  const float* w = dense.weight().f32();
  const Linear blocks = dense.to_fp8_blocks();
  const Linear rows = dense.to_fp8_blocks({Fp8Activations::kFloat, 1});
  EXPECT_EQ(blocks.format(), WeightFormat::kFp8Block);
  EXPECT_TRUE(blocks.quantizes_activations());
  EXPECT_FALSE(rows.quantizes_activations());
  for (int64_t c = 0; c < 128; ++c) {
    // Row 0 sets the 128 x 128 block's scale (1/448): row 1's values fall below e4m3's smallest.
    EXPECT_EQ(blocks.weight().f32()[128 + c], 0.0f) << c;
    for (int64_t r = 0; r < 2; ++r) {
      const float want = w[r * 128 + c], got = rows.weight().f32()[r * 128 + c];
      EXPECT_LE(std::fabs(got - want), std::ldexp(std::fabs(want), -4)) << r << ", " << c;  // 3 mantissa bits
    }
  }
  EXPECT_THROW(dense.to_fp8_blocks({Fp8Activations::kQuantized, 0}), Error);
}

// Block columns: one scale per whole row (block_cols past the width) lets a row's small half share
// its large half's scale (flushed), a scale per 128 columns keeps both.
TEST(LinearFp8, BlockColumnsSetTheScaleToo) {
  Buffer weight(DType::kF32, {1, 256});
  for (int64_t c = 0; c < 256; ++c) weight.f32()[c] = (c < 128 ? 1.0f : 1e-6f) * std::sin(0.1f * float(c + 1));
  const Linear dense = Linear::from_f32(std::move(weight), WeightFormat::kDense, false);
  const Linear per_row = dense.to_fp8_blocks({Fp8Activations::kQuantized, 1, 1 << 20});
  const Linear per_128 = dense.to_fp8_blocks({Fp8Activations::kQuantized, 1, 128});
  for (int64_t c = 128; c < 256; ++c) {
    const float want = dense.weight().f32()[c];
    EXPECT_EQ(per_row.weight().f32()[c], 0.0f) << c;
    EXPECT_LE(std::fabs(per_128.weight().f32()[c] - want), std::ldexp(std::fabs(want), -4)) << c;
  }
}

// Exact columns: the largest-norm column is kept as stored and no longer sets its block's scale,
// so the small weights beside it keep e4m3's precision instead of flushing to zero.
TEST(LinearFp8, ExactColumnsAreKeptAndLeaveTheScaleToTheRest) {
  Buffer weight(DType::kF32, {2, 128});
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 128; ++c) weight.f32()[r * 128 + c] = (c == 5 ? 1e6f : 1.0f) * std::sin(0.1f * float(c + r + 1));
  const Linear dense = Linear::from_f32(std::move(weight), WeightFormat::kDense, false);
  const Linear plain = dense.to_fp8_blocks();
  const Linear kept = dense.to_fp8_blocks({Fp8Activations::kQuantized, 128, 128, 1});
  const float* w = dense.weight().f32();
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 128; ++c) {
      const float want = w[r * 128 + c], got = kept.weight().f32()[r * 128 + c];
      if (c == 5) {
        EXPECT_EQ(got, want) << r;
      } else {
        EXPECT_EQ(plain.weight().f32()[r * 128 + c], 0.0f) << r << ", " << c;  // under column 5's scale
        EXPECT_LE(std::fabs(got - want), std::ldexp(std::fabs(want), -4)) << r << ", " << c;
      }
    }
  EXPECT_FALSE(Fp8Quantization({Fp8Activations::kQuantized, 128, 128, 1}).gpu_format());
  EXPECT_THROW(dense.to_fp8_blocks({Fp8Activations::kQuantized, 128, 128, 129}), Error);
}

}  // namespace
}  // namespace vt
