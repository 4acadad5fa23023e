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

// Exact columns: the largest-norm column leaves the FP8 matrix (zero there, so it no longer sets its
// block's scale and the small weights beside it keep e4m3's precision instead of flushing to zero)
// and is multiplied as stored with the unquantised input.
TEST(LinearFp8, ExactColumnsLeaveTheFp8MatrixAndTheScaleToTheRest) {
  Buffer weight(DType::kF32, {2, 128});
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 128; ++c) weight.f32()[r * 128 + c] = (c == 5 ? 1e6f : 1.0f) * std::sin(0.1f * float(c + r + 1));
  const Linear dense = Linear::from_f32(std::move(weight), WeightFormat::kDense, false);
  const Linear plain = dense.to_fp8_blocks();
  const Linear kept = dense.to_fp8_blocks({Fp8Activations::kQuantized, 128, 128, 1});
  const float* w = dense.weight().f32();
  ASSERT_EQ(kept.exact_columns(), std::vector<int64_t>{5});
  ASSERT_EQ(kept.exact_weight().shape(), Shape({2, 1}));
  EXPECT_TRUE(plain.exact_columns().empty());
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_EQ(kept.exact_weight().f32()[r], w[r * 128 + 5]) << r;
    for (int64_t c = 0; c < 128; ++c) {
      const float want = w[r * 128 + c], got = kept.weight().f32()[r * 128 + c];
      if (c == 5) {
        EXPECT_EQ(got, 0.0f) << r;
      } else {
        EXPECT_EQ(plain.weight().f32()[r * 128 + c], 0.0f) << r << ", " << c;  // under column 5's scale
        EXPECT_LE(std::fabs(got - want), std::ldexp(std::fabs(want), -4)) << r << ", " << c;
      }
    }
  }
  // forward: the FP8 product of the rest plus column 5 times the input as given. x = 100 at column
  // 7 (its group's scale: 100 stays exact in e4m3) and 0.3 at column 5, which the group's e4m3
  // would round to 0.3069 (a difference of ~7e3 in y, the tolerance 1).
  Buffer x(DType::kF32, {1, 128}), y(DType::kF32, {1, 2});
  x.f32()[5] = 0.3f;
  x.f32()[7] = 100.0f;
  kept.forward(y, x);
  for (int64_t r = 0; r < 2; ++r)
    EXPECT_NEAR(y.f32()[r], 100.0f * kept.weight().f32()[r * 128 + 7] + 0.3f * w[r * 128 + 5], 1.0) << r;
  EXPECT_TRUE(Fp8Quantization({Fp8Activations::kQuantized, 128, 128, 1}).gpu_format());
  EXPECT_THROW(dense.to_fp8_blocks({Fp8Activations::kQuantized, 128, 128, 129}), Error);
}

// Every column exact: the FP8 matrix is all zeros and forward is the dense product of the
// unquantised input (the columns' gather and their weights' layout, at several rows).
TEST(LinearFp8, AllColumnsExactIsTheDenseProduct) {
  const int64_t rows = 5, cols = 128, m = 3;
  Buffer weight(DType::kF32, {rows, cols}), x(DType::kF32, {m, cols});
  for (int64_t i = 0; i < rows * cols; ++i) weight.f32()[i] = std::sin(0.37f * float(i) + 0.1f) * (i % 7 == 0 ? 9.0f : 1.0f);
  for (int64_t i = 0; i < m * cols; ++i) x.f32()[i] = std::cos(0.53f * float(i));
  const Linear dense = Linear::from_f32(std::move(weight), WeightFormat::kDense, false);
  const Linear exact = dense.to_fp8_blocks({Fp8Activations::kQuantized, 128, 128, cols});
  Buffer want(DType::kF32, {m, rows}), got(DType::kF32, {m, rows});
  dense.forward(want, x);
  exact.forward(got, x);
  for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(exact.weight().f32()[i], 0.0f) << i;
  for (int64_t i = 0; i < m * rows; ++i) EXPECT_NEAR(got.f32()[i], want.f32()[i], 1e-4f * (1.0f + std::fabs(want.f32()[i]))) << i;
}

TEST(LinearFp8, LargestColumnsAreAscendingWithTiesToTheLowerIndex) {
  EXPECT_EQ(largest_columns({1.0, 5.0, 3.0, 5.0, 0.5}, 3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(largest_columns({2.0, 2.0, 2.0}, 2), (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(largest_columns({1.0}, 0).empty());
  EXPECT_THROW(largest_columns({1.0}, 2), Error);
}

}  // namespace
}  // namespace vt
