// The MoE router CPU reference (ops/moe/moe_cpu.cpp): top-k with ties, renormalised or not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/ops.h"
#include "op_test_support.h"

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

}  // namespace
}  // namespace vt
