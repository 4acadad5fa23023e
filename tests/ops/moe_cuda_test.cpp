// The MoE router kernel (ops/moe/moe.cu) against the CPU reference (the expert GEMV and combine
// are checked through the MoE model tests, tests/cuda/test_cuda_model.cpp).
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "op_cuda_test_support.h"
#include "ops/moe/moe.h"

namespace vt {
namespace {

using testing::relative_l2;
using testing::random_vector;
using testing::upload;
using testing::download;

class MoeCuda : public testing::GpuTest {};

TEST_F(MoeCuda, MoeRouteMatchesCpu) {
  for (auto [tokens, experts, top_k] : {std::tuple<int64_t, int64_t, int64_t>{5, 8, 2}, {3, 256, 8}, {2, 512, 10}}) {
    auto logits = random_vector(tokens * experts, 50 + experts);
    std::vector<int32_t> expected_ids(tokens * top_k);
    std::vector<float> expected_weights(tokens * top_k);
    cpu::moe_route(expected_ids.data(), expected_weights.data(), logits.data(), tokens, experts, top_k, true);
    auto d_logits = upload(logits, DType::kF32);
    cuda::DeviceBuffer ids(DType::kI32, {tokens * top_k}), weights(DType::kF32, {tokens * top_k});
    cuda::moe_route(ids.as<int32_t>(), weights.as<float>(), d_logits.data(), tokens, experts, top_k, true, DType::kF32, nullptr);
    std::vector<int32_t> got_ids(tokens * top_k);
    cuda::copy_to_host(got_ids.data(), ids.data(), got_ids.size() * sizeof(int32_t));
    EXPECT_EQ(got_ids, expected_ids) << experts << " experts";
    EXPECT_LE(relative_l2(download(weights), expected_weights), 1e-6);
  }
}

}  // namespace
}  // namespace vt
