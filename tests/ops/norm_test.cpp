// The RMSNorm CPU references (ops/norm/norm_cpu.cpp) against double-precision formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "ops/ops.h"
#include "op_test_support.h"

namespace vt {
namespace {

using testing::random;

TEST(Norm, RmsNormVariants) {
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

}  // namespace
}  // namespace vt
