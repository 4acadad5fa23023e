// The GEMM CPU references (ops/gemm/gemm_cpu.cpp, fp8_cpu.cpp) against double-precision sums
// and the e4m3 rounding bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/ops.h"
#include "op_test_support.h"

namespace vt {
namespace {

using testing::random;

TEST(Gemm, MatmulAndFp8Quantisation) {
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

}  // namespace
}  // namespace vt
