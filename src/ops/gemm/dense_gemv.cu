// Small dense linears at decode (the GDN in_proj_b/a pair, 96 x 5,120 in the 27B): one block per
// output row, its warps splitting K, a fixed-order shared-memory sum (deterministic). One kernel
// where cuBLASLt runs a split-K GEMM and a reduction; weights read before the PDL wait.
//  - M <= 8: the activations read from global memory (L2) with the weights, per 16-byte chunk.
//  - M = 9..16 (sm90_dense_gemv_staged): the whole [m, k] activation block copied into shared
//    memory by one bulk copy, then every row's products from there: at 16 rows, re-reading each
//    row from L2 per chunk is slower than cuBLASLt.
#include <algorithm>
#include <atomic>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"
#include "cuda/mbarrier.cuh"
#include "ops/gemm/gemm.h"

namespace vt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxRows = 8;

template <typename T, typename Out>
__global__ void __launch_bounds__(kThreads) sm90_dense_gemv(Out* __restrict__ g_y, const T* __restrict__ g_x,
                                                            const T* __restrict__ g_w, int64_t m, int64_t n,
                                                            int64_t k) {
  // A row's sum depends on k and its own values only (the chunks a thread takes, the warp and
  // block sums' orders are fixed): the same bits whatever rows share its block or launch.
  __shared__ float s_partial[kThreads / 32][kMaxRows];
  // Grid y: groups of kMaxRows activation rows (dense_gemv_rows); one group for dense_gemv.
  g_x += int64_t(blockIdx.y) * kMaxRows * k;
  g_y += int64_t(blockIdx.y) * kMaxRows * n;
  m = min(m - int64_t(blockIdx.y) * kMaxRows, int64_t(kMaxRows));
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

constexpr int kStagedThreads = 512;
constexpr int kStagedMaxRows = 16;
constexpr int kStagedAhead = 2;                        // chunks per thread read before the wait
constexpr int64_t kStagedMaxBytes = 200 * 1024;        // the activations in shared memory

template <typename T, typename Out>
__global__ void __launch_bounds__(kStagedThreads) sm90_dense_gemv_staged(Out* __restrict__ g_y,
                                                                         const T* __restrict__ g_x,
                                                                         const T* __restrict__ g_w, int64_t m,
                                                                         int64_t n, int64_t k) {
  extern __shared__ __align__(128) uint8_t s_raw[];
  const T* s_x = reinterpret_cast<const T*>(s_raw);
  __shared__ uint64_t s_loaded;
  __shared__ float s_partial[kStagedThreads / 32][kStagedMaxRows];
  const int64_t row = blockIdx.x, chunks = k / 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* weights = g_w + row * k;
  // Weights are constant: this thread's first chunks before the wait.
  float r_w[kStagedAhead][8];
#pragma unroll
  for (int c = 0; c < kStagedAhead; ++c) {
    const int64_t chunk = threadIdx.x + int64_t(c) * kStagedThreads;
    if (chunk < chunks) device::load8(weights + chunk * 8, r_w[c]);
  }
  if (threadIdx.x == 0) {
    device::barrier_init(&s_loaded, 1);
    device::barrier_init_fence();
  }
  __syncthreads();
  device::pdl_enter();
  if (threadIdx.x == 0) {
    const uint32_t bytes = uint32_t(m * k * int64_t(sizeof(T)));
    device::barrier_expect_bytes(&s_loaded, bytes);
    device::bulk_copy(s_raw, g_x, bytes, &s_loaded);
  }
  device::barrier_wait(&s_loaded, 0);
  float acc[kStagedMaxRows];
#pragma unroll
  for (int r = 0; r < kStagedMaxRows; ++r) acc[r] = 0.0f;
  const auto dot = [&](int64_t chunk, const float* w8) {
#pragma unroll
    for (int r = 0; r < kStagedMaxRows; ++r) {
      if (r >= m) break;
      float r_x[8];
      device::load8(s_x + r * k + chunk * 8, r_x);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r] += r_x[e] * w8[e];
    }
  };
#pragma unroll
  for (int c = 0; c < kStagedAhead; ++c) {
    const int64_t chunk = threadIdx.x + int64_t(c) * kStagedThreads;
    if (chunk < chunks) dot(chunk, r_w[c]);
  }
  for (int64_t chunk = threadIdx.x + int64_t(kStagedAhead) * kStagedThreads; chunk < chunks; chunk += kStagedThreads) {
    float w8[8];
    device::load8(weights + chunk * 8, w8);
    dot(chunk, w8);
  }
#pragma unroll
  for (int r = 0; r < kStagedMaxRows; ++r) {
    const float total = device::warp_sum(acc[r]);
    if (lane == 0) s_partial[warp][r] = total;
  }
  __syncthreads();
  if (threadIdx.x < m) {
    float total = s_partial[0][threadIdx.x];
    for (int w = 1; w < kStagedThreads / 32; ++w) total += s_partial[w][threadIdx.x];
    g_y[int64_t(threadIdx.x) * n + row] = device::from_float<Out>(total);
  }
}

// One launch: the per-chunk kernel up to kMaxRows rows, else the staged one.
template <typename T, typename Out>
void launch_dense(Out* y, const T* x, const T* w, int64_t m, int64_t n, int64_t k,
                  const ::vt::trace::LaunchCost& cost, cudaStream_t stream) {
  if (m <= kMaxRows) {
    launch("sm90_dense_gemv", cost, sm90_dense_gemv<T, Out>, dim3(unsigned(n)), dim3(kThreads), 0, stream, y, x, w,
           m, n, k);
    return;
  }
  VT_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0, "dense_gemv: activations at ", static_cast<const void*>(x),
           " are not 16-byte aligned (the staged kernel copies them in bulk)");
  static std::atomic<uint64_t> devices{0};
  allow_dynamic_shared(sm90_dense_gemv_staged<T, Out>, size_t(kStagedMaxBytes), devices, "sm90_dense_gemv_staged");
  launch("sm90_dense_gemv_staged", cost, sm90_dense_gemv_staged<T, Out>, dim3(unsigned(n)), dim3(kStagedThreads),
         size_t(m * k) * sizeof(T), stream, y, x, w, m, n, k);
}

}  // namespace

bool dense_gemv_supports(int64_t m, int64_t n, int64_t k, DType act) {
  const bool staged = m <= kStagedMaxRows && m * k * int64_t(dtype_size(act)) <= kStagedMaxBytes;
  return m >= 1 && (m <= kMaxRows || staged) && n >= 1 && n <= 65535 && k % 8 == 0;
}

void dense_gemv(void* y, DType out_dtype, const void* x, const void* w, int64_t m, int64_t n, int64_t k, DType act,
                cudaStream_t stream) {
  VT_CHECK(dense_gemv_supports(m, n, k, act), "dense_gemv: m ", m, " n ", n, " k ", k, " (m <= ", kMaxRows,
           ", or m <= ", kStagedMaxRows, " with m x k activations in ", kStagedMaxBytes, " bytes; k % 8 == 0)");
  VT_CHECK(out_dtype == act || out_dtype == DType::kF32, "dense_gemv: output ", dtype_name(out_dtype));
  const double element = double(dtype_size(act));
  const ::vt::trace::LaunchCost cost{"dense_gemv",
                                       {m, n, k, 0},
                                       (double(n) * double(k) + double(m) * double(k)) * element +
                                           double(m) * double(n) * double(dtype_size(out_dtype)),
                                       2.0 * double(m) * double(n) * double(k),
                                       ::vt::trace::OpGroup::kGemmOther};
  VT_DISPATCH_ACT(act, T, {
    if (out_dtype == DType::kF32)
      launch_dense(static_cast<float*>(y), static_cast<const T*>(x), static_cast<const T*>(w), m, n, k, cost, stream);
    else
      launch_dense(static_cast<T*>(y), static_cast<const T*>(x), static_cast<const T*>(w), m, n, k, cost, stream);
  });
}

bool dense_gemv_rows_supports(int64_t m, int64_t n, int64_t k) {
  return m >= 1 && (m + kMaxRows - 1) / kMaxRows <= 65535 && n >= 1 && n <= INT32_MAX && k % 8 == 0;
}

void dense_gemv_rows(void* y, DType out_dtype, const void* x, const void* w, int64_t m, int64_t n, int64_t k, DType act,
                     cudaStream_t stream) {
  VT_CHECK(dense_gemv_rows_supports(m, n, k), "dense_gemv_rows: m ", m, " n ", n, " k ", k,
           " (k % 8 == 0, at most ", int64_t(65535) * kMaxRows, " rows)");
  VT_CHECK(out_dtype == act || out_dtype == DType::kF32, "dense_gemv_rows: output ", dtype_name(out_dtype));
  const int64_t groups = (m + kMaxRows - 1) / kMaxRows;
  const double element = double(dtype_size(act));
  // The weights are read once per group of rows.
  const ::vt::trace::LaunchCost cost{"dense_gemv_rows",
                                       {m, n, k, 0},
                                       (double(groups) * double(n) * double(k) + double(m) * double(k)) * element +
                                           double(m) * double(n) * double(dtype_size(out_dtype)),
                                       2.0 * double(m) * double(n) * double(k),
                                       ::vt::trace::OpGroup::kGemmOther};
  const dim3 grid{unsigned(n), unsigned(groups)};
  VT_DISPATCH_ACT(act, T, {
    if (out_dtype == DType::kF32)
      launch("sm90_dense_gemv", cost, sm90_dense_gemv<T, float>, grid, dim3(kThreads), 0, stream,
             static_cast<float*>(y), static_cast<const T*>(x), static_cast<const T*>(w), m, n, k);
    else
      launch("sm90_dense_gemv", cost, sm90_dense_gemv<T, T>, grid, dim3(kThreads), 0, stream, static_cast<T*>(y),
             static_cast<const T*>(x), static_cast<const T*>(w), m, n, k);
  });
}

}  // namespace vt::cuda
