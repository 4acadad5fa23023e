// Small dense linears at decode (the GDN in_proj_b/a pair, 96 x 5,120 in the 27B): one block per
// output row, its eight warps splitting K, a fixed-order shared-memory sum (deterministic). One
// kernel where cuBLASLt runs a split-K GEMM and a reduction; weights read before the PDL wait.
#include <algorithm>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/launch.cuh"

namespace vt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxRows = 8;

template <typename T, typename Out>
__global__ void __launch_bounds__(kThreads) sm90_dense_gemv(Out* __restrict__ g_y, const T* __restrict__ g_x,
                                                            const T* __restrict__ g_w, int64_t m, int64_t n,
                                                            int64_t k) {
  __shared__ float s_partial[kThreads / 32][kMaxRows];
  const int64_t row = blockIdx.x, chunks = k / 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* weights = g_w + row * k;
  float r_w[8];
  const int64_t first = threadIdx.x;
  if (first < chunks) device::load8(weights + first * 8, r_w);  // weights are constant: before the wait
  device::pdl_enter();
  float acc[kMaxRows];
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) acc[r] = 0.0f;
  for (int64_t chunk = first; chunk < chunks; chunk += kThreads) {
    if (chunk != first) device::load8(weights + chunk * 8, r_w);
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      if (r >= m) break;
      float r_x[8];
      device::load8(g_x + r * k + chunk * 8, r_x);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r] += r_x[e] * r_w[e];
    }
  }
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    const float total = device::warp_sum(acc[r]);
    if (lane == 0) s_partial[warp][r] = total;
  }
  __syncthreads();
  if (threadIdx.x < m) {
    float total = s_partial[0][threadIdx.x];
    for (int w = 1; w < kThreads / 32; ++w) total += s_partial[w][threadIdx.x];
    g_y[int64_t(threadIdx.x) * n + row] = device::from_float<Out>(total);
  }
}

}  // namespace

bool dense_gemv_supports(int64_t m, int64_t n, int64_t k) {
  return m >= 1 && m <= kMaxRows && n >= 1 && n <= 65535 && k % 8 == 0;
}

void dense_gemv(void* y, DType out_dtype, const void* x, const void* w, int64_t m, int64_t n, int64_t k, DType act,
                cudaStream_t stream) {
  VT_CHECK(dense_gemv_supports(m, n, k), "dense_gemv: m ", m, " n ", n, " k ", k, " (m <= ", kMaxRows,
           ", k % 8 == 0)");
  VT_CHECK(out_dtype == act || out_dtype == DType::kF32, "dense_gemv: output ", dtype_name(out_dtype));
  const double element = double(dtype_size(act));
  const ::vt::profile::LaunchCost cost{"dense_gemv",
                                       {m, n, k, 0},
                                       (double(n) * double(k) + double(m) * double(k)) * element +
                                           double(m) * double(n) * double(dtype_size(out_dtype)),
                                       2.0 * double(m) * double(n) * double(k),
                                       ::vt::profile::OpGroup::kGemmOther};
  VT_DISPATCH_ACT(act, T, {
    if (out_dtype == DType::kF32)
      launch("sm90_dense_gemv", cost, sm90_dense_gemv<T, float>, dim3(unsigned(n)), dim3(kThreads), 0, stream,
             static_cast<float*>(y), static_cast<const T*>(x), static_cast<const T*>(w), m, n, k);
    else
      launch("sm90_dense_gemv", cost, sm90_dense_gemv<T, T>, dim3(unsigned(n)), dim3(kThreads), 0, stream,
             static_cast<T*>(y), static_cast<const T*>(x), static_cast<const T*>(w), m, n, k);
  });
}

}  // namespace vt::cuda
