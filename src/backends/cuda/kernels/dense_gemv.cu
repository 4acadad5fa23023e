// Small dense linears at decode (the GDN in_proj_b/a pair, 96 x 5,120 in the 27B): one block per
// output row, its warps splitting K, a fixed-order shared-memory sum (deterministic). One kernel
// where cuBLASLt runs a split-K GEMM and a reduction; weights read before the PDL wait.
//  - M <= 8: the activations read from global memory (L2) with the weights, per 16-byte chunk.
//  - M = 9..16 (sm90_dense_gemv_split): a cluster of four CTAs per output row, each a quarter of
//    K, its [m, k/4] activations copied into shared memory in bulk, then the row's products from
//    there. At M = 16 reading each row from L2 per chunk measured 8.3-20.2 us per call against
//    cuBLASLt's 6.4, one CTA per row copying all m x k activations 5.0
//    (docs/perf/2026-12-02-wgmma-receivers.md).
#include <algorithm>
#include <atomic>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/kernels/cluster.cuh"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/launch.cuh"
#include "backends/cuda/kernels/mbarrier.cuh"

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

constexpr int kSplitThreads = 128;
constexpr int kSplitSlices = 4;  // CTAs per output row (a cluster), each a quarter of K
constexpr int kSplitMaxRows = 16;
constexpr int kSplitAhead = 2;                  // chunks per thread read before the wait
constexpr int64_t kSplitMaxBytes = 200 * 1024;  // a slice's activations in shared memory

__host__ __device__ constexpr int64_t split_chunks(int64_t chunks, int64_t slice) {
  return (slice + 1) * chunks / kSplitSlices - slice * chunks / kSplitSlices;
}

// M = 9..16 (sm90_dense_gemv_split): a cluster of kSplitSlices CTAs per output row, CTA s taking
// the s-th quarter of K: its [m, k/4] activations copied into shared memory (a bulk copy per
// token row), the row's products from there, and the other CTAs' m totals stored into CTA 0's
// shared memory, which adds them in rank order (deterministic) and writes the row. The earlier
// kernel (one CTA per row copying all m x k activations, 160 KB at the 27B's M = 16) took 5.0 us
// per call against cuBLASLt's 6.4: the copy, not the products, was the time
// (docs/perf/2026-12-02-wgmma-receivers.md).
template <typename T, typename Out>
__global__ void __launch_bounds__(kSplitThreads) sm90_dense_gemv_split(Out* __restrict__ g_y,
                                                                       const T* __restrict__ g_x,
                                                                       const T* __restrict__ g_w, int64_t m, int64_t n,
                                                                       int64_t k) {
  extern __shared__ __align__(128) uint8_t s_raw[];
  __shared__ uint64_t s_loaded;
  __shared__ float s_partial[kSplitThreads / 32][kSplitMaxRows];
  __shared__ float s_slices[kSplitSlices][kSplitMaxRows];  // CTA 0: the other CTAs' totals
  const uint32_t slice = device::cluster_rank();
  const int64_t row = blockIdx.x / kSplitSlices, chunks = k / 8;
  const int64_t first = slice * chunks / kSplitSlices, count = split_chunks(chunks, slice);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* s_x = reinterpret_cast<const T*>(s_raw);  // [m][count * 8]
  const T* weights = g_w + row * k + first * 8;
  // Weights are constant: this thread's first chunks before the wait.
  float r_w[kSplitAhead][8];
#pragma unroll
  for (int c = 0; c < kSplitAhead; ++c) {
    const int64_t chunk = threadIdx.x + int64_t(c) * kSplitThreads;
    if (chunk < count) device::load8(weights + chunk * 8, r_w[c]);
  }
  if (threadIdx.x == 0) {
    device::barrier_init(&s_loaded, 1);
    device::barrier_init_fence();
  }
  __syncthreads();
  device::cluster_arrive_relaxed();  // phase 0: this CTA has started (CTA 0's slots may be written)
  device::pdl_enter();
  const uint32_t row_bytes = uint32_t(count * 8 * int64_t(sizeof(T)));
  if (threadIdx.x == 0) device::barrier_expect_bytes(&s_loaded, uint32_t(m) * row_bytes);
  __syncwarp();
  if (warp == 0 && lane < m)
    device::bulk_copy(s_raw + lane * row_bytes, g_x + lane * k + first * 8, row_bytes, &s_loaded);
  device::barrier_wait(&s_loaded, 0);
  float acc[kSplitMaxRows];
#pragma unroll
  for (int r = 0; r < kSplitMaxRows; ++r) acc[r] = 0.0f;
  const auto dot = [&](int64_t chunk, const float* w8) {
#pragma unroll
    for (int r = 0; r < kSplitMaxRows; ++r) {
      if (r >= m) break;
      float r_x[8];
      device::load8(s_x + r * count * 8 + chunk * 8, r_x);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r] += r_x[e] * w8[e];
    }
  };
#pragma unroll
  for (int c = 0; c < kSplitAhead; ++c) {
    const int64_t chunk = threadIdx.x + int64_t(c) * kSplitThreads;
    if (chunk < count) dot(chunk, r_w[c]);
  }
  for (int64_t chunk = threadIdx.x + int64_t(kSplitAhead) * kSplitThreads; chunk < count; chunk += kSplitThreads) {
    float w8[8];
    device::load8(weights + chunk * 8, w8);
    dot(chunk, w8);
  }
#pragma unroll
  for (int r = 0; r < kSplitMaxRows; ++r) {
    const float total = device::warp_sum(acc[r]);
    if (lane == 0) s_partial[warp][r] = total;
  }
  __syncthreads();
  float total = 0.0f;
  if (threadIdx.x < m) {
    total = s_partial[0][threadIdx.x];
    for (int w = 1; w < kSplitThreads / 32; ++w) total += s_partial[w][threadIdx.x];
  }
  device::cluster_wait();  // phase 0
  if (slice != 0 && threadIdx.x < m)
    device::store_cluster(device::cluster_address(&s_slices[slice][threadIdx.x], 0), total);
  device::cluster_arrive();  // phase 1: the totals are in CTA 0's shared memory
  if (slice != 0) return;
  device::cluster_wait();
  if (threadIdx.x < m) {
    for (int s = 1; s < kSplitSlices; ++s) total += s_slices[s][threadIdx.x];
    g_y[int64_t(threadIdx.x) * n + row] = device::from_float<Out>(total);
  }
}

// One launch: the per-chunk kernel up to kMaxRows rows, else the split one.
template <typename T, typename Out>
void launch_dense(Out* y, const T* x, const T* w, int64_t m, int64_t n, int64_t k,
                  const ::vt::profile::LaunchCost& cost, cudaStream_t stream) {
  if (m <= kMaxRows) {
    launch("sm90_dense_gemv", cost, sm90_dense_gemv<T, Out>, dim3(unsigned(n)), dim3(kThreads), 0, stream, y, x, w,
           m, n, k);
    return;
  }
  VT_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0, "dense_gemv: activations at ", static_cast<const void*>(x),
           " are not 16-byte aligned (the split kernel copies them in bulk)");
  static std::atomic<uint64_t> devices{0};
  allow_dynamic_shared(sm90_dense_gemv_split<T, Out>, size_t(kSplitMaxBytes), devices, "sm90_dense_gemv_split");
  const int64_t widest = split_chunks(k / 8, kSplitSlices - 1);  // the last slice is the widest
  launch_clusters("sm90_dense_gemv_split", cost, sm90_dense_gemv_split<T, Out>, dim3(unsigned(n * kSplitSlices)),
                  kSplitSlices, dim3(kSplitThreads), size_t(m * widest * 8) * sizeof(T), stream, y, x, w, m, n, k);
}

}  // namespace

bool dense_gemv_supports(int64_t m, int64_t n, int64_t k, DType act) {
  const bool split = m <= kSplitMaxRows && m * split_chunks(k / 8, kSplitSlices - 1) * 8 * int64_t(dtype_size(act)) <=
                                               kSplitMaxBytes;
  return m >= 1 && (m <= kMaxRows || (split && k / 8 >= kSplitSlices)) && n >= 1 && n <= 65535 && k % 8 == 0;
}

void dense_gemv(void* y, DType out_dtype, const void* x, const void* w, int64_t m, int64_t n, int64_t k, DType act,
                cudaStream_t stream) {
  VT_CHECK(dense_gemv_supports(m, n, k, act), "dense_gemv: m ", m, " n ", n, " k ", k, " (m <= ", kMaxRows,
           ", or m <= ", kSplitMaxRows, " with m x k/4 activations in ", kSplitMaxBytes, " bytes; k % 8 == 0, k >= 32)");
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
      launch_dense(static_cast<float*>(y), static_cast<const T*>(x), static_cast<const T*>(w), m, n, k, cost, stream);
    else
      launch_dense(static_cast<T*>(y), static_cast<const T*>(x), static_cast<const T*>(w), m, n, k, cost, stream);
  });
}

}  // namespace vt::cuda
