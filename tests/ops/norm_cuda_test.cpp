// The RMSNorm kernels (ops/norm/norm.cu) against the CPU reference, and their fused FP8 output
// (with SwiGLU's, ops/activation) against quantising separately. Skips (visibly) where no GPU is
// present, as in CI; on the GPU machine VT_REQUIRE_GPU=1 makes a skip a failure.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "op_cuda_test_support.h"
#include "ops/activation/activation.h"
#include "ops/gemm/gemm.h"
#include "ops/moe/moe.h"
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
// bit for bit, in bf16 and f32, including widths whose last warp is half in the row (n = 384); and
// SwiGLU's codes without its act rows (out null) are the same codes.
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
      // The codes alone (no act rows: out null) are the same codes.
      cuda::DeviceBuffer q_only(DType::kU8, {rows, n}), scales_only(DType::kF32, {rows, groups});
      cuda::silu_mul(nullptr, x.data(), rows, n, act, nullptr, q_only.as<uint8_t>(), scales_only.as<float>());
      cuda::synchronize();
      EXPECT_EQ(download_bytes(q_only), download_bytes(q_ref)) << "silu_mul codes only " << rows << "x" << n;
      EXPECT_EQ(download_bytes(scales_only), download_bytes(scales_ref)) << "silu_mul codes only " << rows << "x" << n;
    }
  }
}

// A MoE layer's pairs as the norm's branch (MoePairs: the combine inside the norm) give the bits of
// moe_combine then the norm: the residual, the output and its FP8 codes; bf16 and f32, one row
// to 64, top 8 and 9 (a folded shared expert), widths on both of the kernel's register plans.
TEST_F(NormCuda, MoePairsBranchEqualsCombineThenNorm) {
  for (DType act : {DType::kBF16, DType::kF32}) {
    for (int64_t rows : {1, 7, 64}) {
      for (int64_t n : {2048, 6144}) {
        for (int64_t top_k : {8, 9}) {
          const int64_t pairs = rows * top_k, groups = n / 128;
          const std::string what = std::string(dtype_name(act)) + " " + std::to_string(rows) + "x" +
                                   std::to_string(n) + " top " + std::to_string(top_k);
          cuda::DeviceBuffer expert_out(act, {pairs, n}), weights(DType::kF32, {pairs}), w(DType::kF32, {n});
          cuda::fill_random(expert_out.data(), act, pairs * n, 5 + n + rows, 1.0f, 0.0f, nullptr);
          cuda::fill_random(weights.data(), DType::kF32, pairs, 6 + rows, 0.2f, 0.1f, nullptr);
          cuda::fill_random(w.data(), DType::kF32, n, 7 + n, 0.5f, 0.0f, nullptr);
          cuda::DeviceBuffer residual_a(act, {rows, n}), residual_b(act, {rows, n}), branch(act, {rows, n});
          cuda::fill_random(residual_a.data(), act, rows * n, 8 + rows, 2.0f, 0.0f, nullptr);
          cuda::synchronize();
          VT_CUDA_CHECK(cudaMemcpy(residual_b.data(), residual_a.data(), residual_a.bytes(), cudaMemcpyDeviceToDevice));
          cuda::DeviceBuffer out_a(act, {rows, n}), out_b(act, {rows, n});
          cuda::DeviceBuffer q_a(DType::kU8, {rows, n}), q_b(DType::kU8, {rows, n});
          cuda::DeviceBuffer s_a(DType::kF32, {rows, groups}), s_b(DType::kF32, {rows, groups});
          cuda::moe_combine(branch.data(), expert_out.data(), weights.as<float>(), nullptr, nullptr, rows, n, top_k, act,
                            nullptr);
          cuda::add_rms_norm(out_a.data(), residual_a.data(), branch.data(), w.as<float>(), rows, n, 1e-6f, 1.0f, act,
                             nullptr, q_a.as<uint8_t>(), s_a.as<float>());
          const cuda::MoePairs moe_pairs{expert_out.data(), weights.as<float>(), top_k};
          cuda::add_rms_norm(out_b.data(), residual_b.data(), &moe_pairs, w.as<float>(), rows, n, 1e-6f, 1.0f, act,
                             nullptr, q_b.as<uint8_t>(), s_b.as<float>());
          cuda::synchronize();
          EXPECT_EQ(download_bytes(residual_b), download_bytes(residual_a)) << "residual, " << what;
          EXPECT_EQ(download_bytes(out_b), download_bytes(out_a)) << "output, " << what;
          EXPECT_EQ(download_bytes(q_b), download_bytes(q_a)) << "codes, " << what;
          EXPECT_EQ(download_bytes(s_b), download_bytes(s_a)) << "scales, " << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace vt
