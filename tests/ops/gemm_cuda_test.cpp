// The GEMM kernels (ops/gemm/) against the CPU reference: the dense GEMV, exact columns, FP8
// weight-block quantisation, every FP8 block-scaled backend of the registry on awkward shapes,
// and a GEMM left as partials that the norm after it sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <tuple>
#include <vector>

#include "../numerics.h"
#include "core/dtype.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "model/linear.h"
#include "op_cuda_test_support.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/partials.h"
#include "ops/gemm/registry.h"
#include "ops/norm/norm.h"

namespace vt {
namespace {

using testing::relative_l2;
using testing::random_vector;
using testing::DeviceVector;
using testing::download_bytes;
using testing::upload_as;
using testing::download_as_f32;

class GemmCuda : public testing::GpuTest {};

// The narrow dense GEMV (GDN b/a projections, MoE routers) against the CPU matmul, f32 and bf16
// activations (inputs rounded to bf16 on the CPU side too), f32 output.
TEST_F(GemmCuda, DenseGemvMatchesCpu) {
  for (DType act : {DType::kF32, DType::kBF16}) {
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 96, 5120}, {3, 1, 2048}, {8, 257, 72}, {5, 40, 4104},
                                {16, 96, 5120}, {16, 96, 3072}, {9, 257, 72}, {13, 40, 1032}}) {
      if (act == DType::kF32 && m * k * 4 > 200 * 1024) {  // the staged kernel's activations do not fit
        EXPECT_FALSE(cuda::dense_gemv_supports(m, n, k, act)) << m << "x" << n << "x" << k;
        continue;
      }
      auto x = random_vector(m * k, 31 + k), w = random_vector(n * k, 32 + n);
      if (act == DType::kBF16)
        for (auto* v : {&x, &w})
          for (float& value : *v) value = bf16_to_f32(f32_to_bf16(value));
      std::vector<float> expected(m * n);
      cpu::matmul_nt(expected.data(), x.data(), w.data(), m, n, k);
      cuda::DeviceBuffer d_x(act, {m, k}), d_w(act, {n, k});
      DeviceVector f_x(x), f_w(w), d_y(m * n);
      cuda::convert(d_x.data(), act, f_x.data, DType::kF32, m * k, nullptr);
      cuda::convert(d_w.data(), act, f_w.data, DType::kF32, n * k, nullptr);
      ASSERT_TRUE(cuda::dense_gemv_supports(m, n, k, act)) << m << "x" << n << "x" << k;
      cuda::dense_gemv(d_y.data, DType::kF32, d_x.data(), d_w.data(), m, n, k, act, nullptr);
      cuda::synchronize();
      EXPECT_LE(relative_l2(d_y.to_host(), expected), 1e-5) << dtype_name(act) << " " << m << "x" << n << "x" << k;
    }
  }
  EXPECT_FALSE(cuda::dense_gemv_supports(17, 96, 5120, DType::kBF16));
  EXPECT_FALSE(cuda::dense_gemv_supports(16, 96, 5120, DType::kF32));  // 320 KB of activations
  EXPECT_FALSE(cuda::dense_gemv_supports(1, 96, 5121, DType::kBF16));
}

// An FP8 output layer's exact columns on the device against the CPU: the column sums of squares
// (and so the choice, model/linear.h's largest_columns), the columns taken out of the matrix (zero
// there after), and y += x[:, columns] @ w_exact^T at 1..19 rows (two passes of 16), f32 and bf16.
TEST_F(GemmCuda, ExactColumnsMatchCpu) {
  const int64_t n = 1000, k = 264, count = 16;
  for (DType act : {DType::kF32, DType::kBF16}) {
    auto w = random_vector(n * k, 41);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c : {3, 77, 200, 263}) w[r * k + c] *= 8.0f;  // four columns far above the rest
    if (act == DType::kBF16)
      for (float& value : w) value = bf16_to_f32(f32_to_bf16(value));
    cuda::DeviceBuffer d_w(act, {n, k});
    DeviceVector f_w(w);
    cuda::convert(d_w.data(), act, f_w.data, DType::kF32, n * k, nullptr);
    std::vector<double> expected_sums(size_t(k), 0.0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) expected_sums[size_t(c)] += double(w[r * k + c]) * double(w[r * k + c]);
    const std::vector<double> sums = cuda::column_sum_squares(d_w.data(), act, n, k, nullptr);
    ASSERT_EQ(sums.size(), size_t(k));
    for (int64_t c = 0; c < k; ++c) EXPECT_NEAR(sums[size_t(c)], expected_sums[size_t(c)], 1e-12 * expected_sums[size_t(c)]) << c;
    const std::vector<int64_t> columns = largest_columns(sums, count);
    EXPECT_EQ(columns, largest_columns(expected_sums, count));
    for (int64_t c : {3, 77, 200, 263}) EXPECT_TRUE(std::binary_search(columns.begin(), columns.end(), c)) << c;

    const std::vector<int32_t> ids(columns.begin(), columns.end());
    cuda::DeviceBuffer d_ids(DType::kI32, {count}), d_exact(act, {n, count});
    cuda::copy_to_device(d_ids.data(), ids.data(), ids.size() * sizeof(int32_t));
    cuda::take_columns(d_exact.data(), d_w.data(), act, d_ids.as<int32_t>(), count, n, k, nullptr);
    DeviceVector f_exact(size_t(n * count)), f_rest(size_t(n * k));
    cuda::convert(f_exact.data, DType::kF32, d_exact.data(), act, n * count, nullptr);
    cuda::convert(f_rest.data, DType::kF32, d_w.data(), act, n * k, nullptr);
    cuda::synchronize();
    const std::vector<float> exact = f_exact.to_host(), rest = f_rest.to_host();
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(exact[r * count + i], w[r * k + columns[size_t(i)]]) << r << "," << i;
      for (int64_t c = 0; c < k; ++c) {
        const bool taken = std::binary_search(columns.begin(), columns.end(), c);
        ASSERT_EQ(rest[r * k + c], taken ? 0.0f : w[r * k + c]) << r << "," << c;
      }
    }

    for (int64_t m : {1, 7, 16, 19}) {
      auto x = random_vector(m * k, 43 + m), y = random_vector(m * n, 44 + m);
      if (act == DType::kBF16)
        for (auto* v : {&x, &y})
          for (float& value : *v) value = bf16_to_f32(f32_to_bf16(value));
      std::vector<float> expected = y;
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j) {
          float sum = 0.0f;
          for (int64_t i = 0; i < count; ++i) sum += x[r * k + columns[size_t(i)]] * w[j * k + columns[size_t(i)]];
          expected[r * n + j] += sum;
        }
      cuda::DeviceBuffer d_x(act, {m, k}), d_y(act, {m, n});
      DeviceVector f_x(x), f_y(y), f_out(size_t(m * n));
      cuda::convert(d_x.data(), act, f_x.data, DType::kF32, m * k, nullptr);
      cuda::convert(d_y.data(), act, f_y.data, DType::kF32, m * n, nullptr);
      cuda::exact_columns_add(d_y.data(), n, d_x.data(), d_ids.as<int32_t>(), d_exact.data(), m, n, k, count, act,
                              nullptr);
      cuda::convert(f_out.data, DType::kF32, d_y.data(), act, m * n, nullptr);
      cuda::synchronize();
      // bf16: y's final rounding (2^-9 of each value); f32: the sum's order.
      EXPECT_LE(relative_l2(f_out.to_host(), expected), act == DType::kBF16 ? 4e-3 : 1e-6)
          << dtype_name(act) << " m = " << m;
    }
  }
  EXPECT_TRUE(cuda::exact_columns_supported(32));
  EXPECT_FALSE(cuda::exact_columns_supported(12));
  EXPECT_FALSE(cuda::exact_columns_supported(72));
}

// A BF16/F32 weight quantised to FP8 128x128 blocks at load (the FP8 lm_head) gives the codes and
// scales of the checkpoint rule computed on the CPU, bit for bit, with partial edge blocks.
TEST_F(GemmCuda, WeightBlockQuantisationMatchesCpu) {
  const int64_t n = 300, k = 200, nb = 3, kb = 2;
  auto w = random_vector(n * k, 17);
  DeviceVector d_w(w);
  cuda::DeviceBuffer q(DType::kU8, {n, k}), scales(DType::kF32, {nb, kb});
  cuda::fp8_quantize_weight_blocks(q.as<uint8_t>(), scales.as<float>(), d_w.data, DType::kF32, n, k, nullptr);
  cuda::synchronize();
  std::vector<uint8_t> codes(size_t(n * k));
  std::vector<float> got_scales(size_t(nb * kb));
  cuda::copy_to_host(codes.data(), q.data(), codes.size());
  cuda::copy_to_host(got_scales.data(), scales.data(), got_scales.size() * sizeof(float));
  for (int64_t bi = 0; bi < nb; ++bi)
    for (int64_t bj = 0; bj < kb; ++bj) {
      float absmax = 0.0f;
      for (int64_t r = bi * 128; r < std::min(n, bi * 128 + 128); ++r)
        for (int64_t c = bj * 128; c < std::min(k, bj * 128 + 128); ++c) absmax = std::max(absmax, std::fabs(w[r * k + c]));
      const float scale = std::max(absmax, 1e-12f) / 448.0f;
      ASSERT_EQ(got_scales[bi * kb + bj], scale) << bi << "," << bj;
      for (int64_t r = bi * 128; r < std::min(n, bi * 128 + 128); ++r)
        for (int64_t c = bj * 128; c < std::min(k, bj * 128 + 128); ++c)
          ASSERT_EQ(codes[r * k + c], f32_to_f8e4m3(std::clamp(w[r * k + c] / scale, -448.0f, 448.0f))) << r << "," << c;
    }
}

// FP8 W8A8 block GEMM against the CPU emulation: quantised activations, dequantised weights.
TEST_F(GemmCuda, Fp8BlockGemmMatchesCpu) {
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 256, 512}, {1, 136, 6144}, {1, 520, 17408},
                         {7, 200, 192}, {16, 384, 5120}, {33, 130, 1040}, {64, 136, 2048},
                         {129, 200, 1040}, {8, 5120, 6144}, {2, 34816, 512}, {7, 1000, 4112},
                         {65, 1000, 4112}, {57, 384, 2048}, {278, 256, 1024}}) {
    auto x = random_vector(m * k, 11 + m);
    std::vector<uint8_t> codes(n * k);
    std::mt19937_64 rng(n);
    for (auto& code : codes) {
      code = uint8_t(rng());
      if ((code & 0x7F) == 0x7F) code ^= 1;
    }
    const int64_t scale_rows = (n + 127) / 128, scale_cols = (k + 127) / 128;
    std::vector<float> scales(scale_rows * scale_cols);
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = 1e-3f * float(1 + i % 7);
    // CPU: y = dequant(quant(x)) @ dequant(w)^T
    std::vector<float> x_q(m * k), w_f(n * k), expected(m * n);
    cpu::fp8_quant_dequant_rows(x_q.data(), x.data(), m, k, 128);
    cpu::fp8_block_dequant(w_f.data(), codes.data(), scales.data(), DType::kF32, n, k, 128, 128);
    cpu::matmul_nt(expected.data(), x_q.data(), w_f.data(), m, n, k);

    DeviceVector d_x(x), d_scales(scales), d_y(m * n);
    cuda::DeviceBuffer d_codes(DType::kU8, {n, k}), d_q(DType::kU8, {m, k}), d_a_scales(DType::kF32, {m, scale_cols});
    cuda::copy_to_device(d_codes.data(), codes.data(), codes.size());
    cuda::fp8_quantize_rows(d_q.as<uint8_t>(), d_a_scales.as<float>(), d_x.data, m, k, DType::kF32, nullptr);
    // Every backend that serves the shape (the registry's, cuBLASLt's block-scaled path included),
    // twice: split-K sums are bit-identical run to run.
    cuda::Fp8GemmRegistry registry(m, k);
    int served = 0;
    for (cuda::GemmBackend backend : cuda::kAllGemmBackends) {
      if (!registry.supports(backend, m, n, k, n, DType::kF32)) continue;
      ++served;
      std::vector<std::vector<float>> runs;
      for (int run = 0; run < 2; ++run) {
        registry.run(backend, d_y.data, n, d_q.as<uint8_t>(), d_a_scales.as<float>(), d_codes.as<uint8_t>(),
                     d_scales.data, m, n, k, DType::kF32, nullptr);
        cuda::synchronize();
        runs.push_back(d_y.to_host());
      }
      const bool wgmma = backend == cuda::GemmBackend::kWgmma || backend == cuda::GemmBackend::kWgmmaCluster;
      // wgmma and cuBLASLt sum blocks of e4m3 products in the tensor core's narrower accumulator
      // (tests/numerics.h says why each bound).
      const double bound = backend == cuda::GemmBackend::kCublasLt ? numerics::kFp8GemmCublasLtRelL2
                           : wgmma                                  ? numerics::kFp8GemmWgmmaRelL2
                                                                   : numerics::kFp8GemmFp32RelL2;
      if (wgmma)
        std::printf("%s %lldx%lldx%lld: rel L2 %.3g\n", cuda::gemm_backend_name(backend), (long long)m, (long long)n,
                    (long long)k, relative_l2(runs[0], expected));
      EXPECT_LE(relative_l2(runs[0], expected), bound)
          << m << "x" << n << "x" << k << " " << cuda::gemm_backend_name(backend);
      if (backend != cuda::GemmBackend::kCublasLt) {
        EXPECT_TRUE(runs[0] == runs[1]) << m << "x" << n << "x" << k << " " << cuda::gemm_backend_name(backend)
                                        << " not deterministic";
      }
    }
    EXPECT_GE(served, m == 1 ? 5 : 1) << m << "x" << n << "x" << k;
    // cuBLASLt's padded path (rows it refuses run as the next multiple of 16 through the
    // registry's own buffers): the output rows hold the same product, nothing past them is written.
    if (k % 128 == 0 && m % 16 != 0) {
      cuda::Fp8GemmRegistry padded(m, k, {}, n);
      if (padded.supports(cuda::GemmBackend::kCublasLt, m, n, k, n, DType::kF32)) {
        DeviceVector d_wide(std::vector<float>(size_t((m + 1) * n), -7.0f));
        padded.run(cuda::GemmBackend::kCublasLt, d_wide.data, n, d_q.as<uint8_t>(), d_a_scales.as<float>(),
                   d_codes.as<uint8_t>(), d_scales.data, m, n, k, DType::kF32, nullptr);
        cuda::synchronize();
        std::vector<float> wide = d_wide.to_host(), rows(wide.begin(), wide.begin() + m * n);
        EXPECT_LE(relative_l2(rows, expected), numerics::kFp8GemmCublasLtRelL2) << m << "x" << n << "x" << k << " padded";
        EXPECT_TRUE(std::all_of(wide.begin() + m * n, wide.end(), [](float v) { return v == -7.0f; }))
            << m << "x" << n << "x" << k << ": the padded path wrote past its rows";
      }
    }
    if (k % 128 == 0 && n % 128 == 0 && m >= 16) {
      EXPECT_TRUE(registry.supports(cuda::GemmBackend::kCublasLt, m, n, k, n, DType::kF32))
          << "cuBLASLt refused " << m << "x" << n << "x" << k;
    }
  }
}

// A GEMM left as partials and summed by the norm after it (wgmma_partials + add_rms_norm) against
// the same GEMM written out and then normed: within the wgmma bound everywhere, the branch itself
// against the CPU product, and bit for bit where the written-out GEMM runs the same stream-K split
// (n = 8704: 68 tiles, neither one per tile nor the receivers split on an H100 / H200), run to
// run identical; f32 and bf16 activations.
TEST_F(GemmCuda, GemmPartialsSummedByTheNorm) {
  for (DType act : {DType::kF32, DType::kBF16}) {
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 256, 512}, {7, 5120, 6144}, {16, 5120, 17408},
                           {13, 8704, 1040}, {64, 384, 5120}, {3, 128, 128}, {9, 1280, 4112}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(act) << " " << m << "x" << n << "x" << k);
      const int64_t kb = (k + 127) / 128, nb = n / 128;
      std::vector<uint8_t> codes(n * k);
      std::mt19937_64 rng(n + k);
      for (auto& code : codes) {
        code = uint8_t(rng());
        if ((code & 0x7F) == 0x7F) code ^= 1;
      }
      std::vector<float> scales(nb * kb);
      for (size_t i = 0; i < scales.size(); ++i) scales[i] = 1e-3f * float(1 + i % 5);
      const auto x = random_vector(m * k, 21 + m), residual0 = random_vector(m * n, 22 + n), w = random_vector(n, 23);
      std::vector<float> x_q(m * k), w_f(n * k), product(m * n);
      cpu::fp8_quant_dequant_rows(x_q.data(), x.data(), m, k, 128);
      cpu::fp8_block_dequant(w_f.data(), codes.data(), scales.data(), DType::kF32, n, k, 128, 128);
      cpu::matmul_nt(product.data(), x_q.data(), w_f.data(), m, n, k);

      DeviceVector d_x(x), d_scales(scales), d_w(w);
      cuda::DeviceBuffer d_codes(DType::kU8, {n, k}), d_q(DType::kU8, {m, k}), d_a_scales(DType::kF32, {m, kb});
      cuda::copy_to_device(d_codes.data(), codes.data(), codes.size());
      cuda::fp8_quantize_rows(d_q.as<uint8_t>(), d_a_scales.as<float>(), d_x.data, m, k, DType::kF32, nullptr);
      cuda::DeviceBuffer x_act(act, {m, k}), residual(act, {m, n}), y(act, {m, n}), out(act, {m, n});
      cuda::DeviceBuffer norm_q(DType::kU8, {m, n}), norm_scales(DType::kF32, {m, nb});
      cuda::Fp8GemmRegistry registry(m, k);
      ASSERT_TRUE(registry.supports_partials(m, n, k, act));
      // [residual after the add, norm output, its FP8 codes] as f32 / bytes on the host.
      struct Result {
        std::vector<float> residual, out;
        std::vector<uint8_t> q;
      };
      const auto norm = [&](cuda::Branch branch) {
        upload_as(residual, residual0, act);
        cuda::add_rms_norm(out.data(), residual.data(), branch, d_w.data, m, n, 1e-6f, 1.0f, act, nullptr,
                           norm_q.as<uint8_t>(), norm_scales.as<float>());
        cuda::synchronize();
        return Result{download_as_f32(residual, act, size_t(m * n)), download_as_f32(out, act, size_t(m * n)),
                      download_bytes(norm_q)};
      };
      registry.run(cuda::GemmBackend::kWgmma, y.data(), n, d_q.as<uint8_t>(), d_a_scales.as<float>(),
                   d_codes.as<uint8_t>(), d_scales.data, m, n, k, act, nullptr);
      const Result written = norm(y.data());
      std::vector<Result> deferred;
      for (int run = 0; run < 2; ++run) {
        const cuda::GemmPartials partials = registry.run_partials(
            d_q.as<uint8_t>(), d_a_scales.as<float>(), d_codes.as<uint8_t>(), d_scales.data, m, n, k, nullptr);
        deferred.push_back(norm(&partials));
      }
      EXPECT_TRUE(deferred[0].residual == deferred[1].residual && deferred[0].q == deferred[1].q)
          << "not deterministic";
      // The branch the norm added: residual after - before, against the CPU product.
      upload_as(residual, residual0, act);
      const std::vector<float> before = download_as_f32(residual, act, size_t(m * n));
      std::vector<float> added(m * n);
      for (int64_t i = 0; i < m * n; ++i) added[i] = deferred[0].residual[i] - before[i];
      const double rounding = act == DType::kBF16 ? 1e-2 : 0.0;  // the sum rounded to bf16 twice
      EXPECT_LE(relative_l2(added, product), numerics::kFp8GemmWgmmaRelL2 + rounding);
      EXPECT_LE(relative_l2(deferred[0].out, written.out), 2 * numerics::kFp8GemmWgmmaRelL2 + rounding);
      if (n == 8704) {
        EXPECT_TRUE(deferred[0].residual == written.residual) << "not the in-kernel stream-K sum bit for bit";
        EXPECT_TRUE(deferred[0].out == written.out && deferred[0].q == written.q);
      }
    }
  }
}

}  // namespace
}  // namespace vt
