// The RMSNorm kernels (ops/norm/norm.cu) against the CPU reference, and their fused FP8 output
// (with SwiGLU's, ops/activation) against quantising separately. Skips (visibly) where no GPU is
// present, as in CI; on the GPU machine VT_REQUIRE_GPU=1 makes a skip a failure.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "op_cuda_test_support.h"
#include "ops/activation/activation.h"
#include "ops/gemm/gemm.h"
#include "ops/norm/norm.h"

namespace vt {
namespace {

using testing::relative_l2;
using testing::random_vector;
using testing::DeviceVector;
using testing::download_bytes;

class NormCuda : public testing::GpuTest {};

TEST_F(NormCuda, RmsNormMatchesCpu) {
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 64}, {7, 5120}, {33, 2048}, {5, 250}}) {
    auto x = random_vector(rows * n, 1 + n), w = random_vector(n, 2 + n);
    std::vector<float> expected(rows * n);
    cpu::rms_norm(expected.data(), x.data(), w.data(), rows, n, 1e-6f, 1.0f);
    DeviceVector d_x(x), d_w(w), d_out(rows * n);
    cuda::rms_norm_f32(d_out.data, d_x.data, d_w.data, rows, n, 1e-6f, 1.0f, nullptr);
    cuda::synchronize();
    EXPECT_LE(relative_l2(d_out.to_host(), expected), 1e-6) << rows << "x" << n;
  }
}

// The norm and SwiGLU kernels' fused FP8 outputs equal quantising their stored output afterwards,
// bit for bit, in bf16 and f32, including widths whose last warp is half in the row (n = 384).
TEST_F(NormCuda, FusedQuantisationEqualsSeparateQuantisation) {
  for (DType act : {DType::kBF16, DType::kF32}) {
    for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 5120}, {3, 384}, {5, 2048}, {2, 17408}}) {
      const int64_t groups = n / 128;
      cuda::DeviceBuffer x(act, {rows, 2 * n}), branch(act, {rows, n}), out(act, {rows, n}), w(DType::kF32, {n});
      cuda::fill_random(x.data(), act, 2 * rows * n, 1 + n, 3.0f, 0.0f, nullptr);
      cuda::fill_random(branch.data(), act, rows * n, 2 + n, 1.0f, 0.0f, nullptr);
      cuda::fill_random(w.data(), DType::kF32, n, 3 + n, 0.5f, 0.0f, nullptr);
      cuda::DeviceBuffer q(DType::kU8, {rows, n}), scales(DType::kF32, {rows, groups});
      cuda::DeviceBuffer q_ref(DType::kU8, {rows, n}), scales_ref(DType::kF32, {rows, groups});
      // Norm (x is the residual, its first n columns of each 2n row are not touched by the norm).
      cuda::DeviceBuffer residual(act, {rows, n});
      cuda::fill_random(residual.data(), act, rows * n, 4 + n, 2.0f, 0.0f, nullptr);
      cuda::add_rms_norm(out.data(), residual.data(), branch.data(), w.as<float>(), rows, n, 1e-6f, 1.0f, act, nullptr,
                         q.as<uint8_t>(), scales.as<float>());
      cuda::fp8_quantize_rows(q_ref.as<uint8_t>(), scales_ref.as<float>(), out.data(), rows, n, act, nullptr);
      cuda::synchronize();
      EXPECT_EQ(download_bytes(q), download_bytes(q_ref)) << "norm " << dtype_name(act) << " " << rows << "x" << n;
      EXPECT_EQ(download_bytes(scales), download_bytes(scales_ref)) << "norm scales " << rows << "x" << n;
      // SwiGLU.
      cuda::silu_mul(out.data(), x.data(), rows, n, act, nullptr, q.as<uint8_t>(), scales.as<float>());
      cuda::fp8_quantize_rows(q_ref.as<uint8_t>(), scales_ref.as<float>(), out.data(), rows, n, act, nullptr);
      cuda::synchronize();
      EXPECT_EQ(download_bytes(q), download_bytes(q_ref)) << "silu_mul " << dtype_name(act) << " " << rows << "x" << n;
      EXPECT_EQ(download_bytes(scales), download_bytes(scales_ref)) << "silu_mul scales " << rows << "x" << n;
    }
  }
}

}  // namespace
}  // namespace vt
