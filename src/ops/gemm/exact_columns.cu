// An FP8 output layer's exact columns (Fp8Quantization::exact_columns, model/linear.h): the few
// input columns of largest norm stay out of the FP8 matrix and are multiplied as stored with the
// unquantised input, the product added to the FP8 GEMM's output. At load: each column's sum of
// squares (to choose them), then the chosen columns copied out and zeroed in the matrix that is
// quantised next. Per step: y [m, n] += x [m, exact] @ w_exact [n, count]^T, a thread per output
// column reading its `count` weights (64 bytes at 32 columns: 1.25% of the FP8 matrix's bytes on
// the 27B's 5,120-wide output layer).
#include <algorithm>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/device_buffer.h"
#include "cuda/launch.cuh"
#include "ops/gemm/gemm.h"

namespace vt::cuda {
namespace {

constexpr int kColumnsPerBlock = 128;

// partials [chunks, k]: chunk c's sum over its rows of w[row, col]^2, in double (squares of bf16
// values are exact in double, and so are their sums in practice: the host adds the chunks in order).
template <typename T>
__global__ void __launch_bounds__(kColumnsPerBlock) sm90_column_sum_squares(double* __restrict__ g_partials,
                                                                            const T* __restrict__ g_w, int64_t n,
                                                                            int64_t k, int64_t rows_per_chunk) {
  const int64_t column = int64_t(blockIdx.x) * kColumnsPerBlock + threadIdx.x;
  if (column >= k) return;
  const int64_t first = int64_t(blockIdx.y) * rows_per_chunk, last = std::min(n, first + rows_per_chunk);
  double sum = 0.0;
  for (int64_t row = first; row < last; ++row) {
    const double v = device::to_float(g_w[row * k + column]);
    sum += v * v;
  }
  g_partials[int64_t(blockIdx.y) * k + column] = sum;
}

// out [n, count] = w[:, columns]; then w[:, columns] = 0.
template <typename T>
__global__ void sm90_take_columns(T* __restrict__ g_out, T* __restrict__ g_w, const int32_t* __restrict__ g_columns,
                                  int64_t n, int64_t k, int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n * count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / count, column = g_columns[i % count];
    g_out[i] = g_w[row * k + column];
    g_w[row * k + column] = device::from_float<T>(0.0f);
  }
}

constexpr int kAddThreads = 256;
constexpr int kAddRows = 16;  // input rows per pass (their picked columns in shared memory)
constexpr int kMaxColumns = 64;

// y [m, ldy] += x [m, k] at columns @ w [n, 8 kGroups]^T. A thread per output column j: its
// 8 kGroups weights in registers, requested before the programmatic-launch wait (constant); per
// pass of up to 16 input rows, every row's y requested at once, the dot products in fp32 from the
// rows' picked inputs in shared memory, then the stores. (Each thread's loads in a chain, a y
// read-modify-write per row after the weights' loads one group at a time, measured 8.6 us at 1 row
// and 34 us at 16 on the 27B output layer: a chain of ~20 round trips.)
template <typename T, int kGroups>
__global__ void __launch_bounds__(kAddThreads) sm90_exact_columns_add(T* __restrict__ g_y, int64_t ldy,
                                                                      const T* __restrict__ g_x,
                                                                      const int32_t* __restrict__ g_columns,
                                                                      const T* __restrict__ g_w, int64_t m, int64_t n,
                                                                      int64_t k) {
  constexpr int kCount = 8 * kGroups;
  __shared__ float s_x[kAddRows][kCount];
  const int64_t j = int64_t(blockIdx.x) * kAddThreads + threadIdx.x;
  const bool active = j < n;
  float w[kCount];
  if (active) {
#pragma unroll
    for (int g = 0; g < kGroups; ++g) device::load8(g_w + j * kCount + 8 * g, w + 8 * g);
  }
  device::pdl_enter();
  for (int64_t r0 = 0; r0 < m; r0 += kAddRows) {
    const int rows = int(std::min<int64_t>(kAddRows, m - r0));
    __syncthreads();  // the previous pass's reads of s_x are done
    for (int i = threadIdx.x; i < rows * kCount; i += kAddThreads)
      s_x[i / kCount][i % kCount] = device::to_float(g_x[(r0 + i / kCount) * k + g_columns[i % kCount]]);
    float acc[kAddRows];
#pragma unroll
    for (int r = 0; r < kAddRows; ++r) acc[r] = r < rows && active ? device::to_float(g_y[(r0 + r) * ldy + j]) : 0.0f;
    __syncthreads();
    if (!active) continue;
#pragma unroll
    for (int r = 0; r < kAddRows; ++r) {
      if (r >= rows) break;
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < kCount; ++c) sum += s_x[r][c] * w[c];
      acc[r] += sum;
    }
#pragma unroll
    for (int r = 0; r < kAddRows; ++r)
      if (r < rows) g_y[(r0 + r) * ldy + j] = device::from_float<T>(acc[r]);
  }
}

template <typename T, int kGroups>
void launch_exact_columns_add(const ::vt::trace::LaunchCost& cost, dim3 grid, cudaStream_t stream, T* y, int64_t ldy,
                              const T* x, const int32_t* columns, const T* w, int64_t m, int64_t n, int64_t k,
                              int64_t count) {
  if constexpr (kGroups > 1) {
    if (count < 8 * kGroups)
      return launch_exact_columns_add<T, kGroups - 1>(cost, grid, stream, y, ldy, x, columns, w, m, n, k, count);
  }
  launch("sm90_exact_columns_add", cost, sm90_exact_columns_add<T, kGroups>, grid, dim3(kAddThreads), 0, stream, y,
         ldy, x, columns, w, m, n, k);
}

}  // namespace

std::vector<double> column_sum_squares(const void* w, DType dtype, int64_t n, int64_t k, cudaStream_t stream) {
  VT_CHECK(n > 0 && k > 0, "column_sum_squares: ", n, " x ", k);
  const int64_t chunks = std::min<int64_t>(n, 256), rows_per_chunk = (n + chunks - 1) / chunks;
  DeviceBuffer partials(DType::kF64, {chunks, k});
  const dim3 grid(unsigned((k + kColumnsPerBlock - 1) / kColumnsPerBlock), unsigned(chunks));
  VT_DISPATCH_ACT(dtype, T,
                  sm90_column_sum_squares<T><<<grid, kColumnsPerBlock, 0, stream>>>(
                      partials.as<double>(), static_cast<const T*>(w), n, k, rows_per_chunk));
  VT_CUDA_CHECK_LAUNCH("sm90_column_sum_squares");
  std::vector<double> host(size_t(chunks * k));
  VT_CUDA_CHECK(cudaMemcpyAsync(host.data(), partials.data(), host.size() * sizeof(double), cudaMemcpyDeviceToHost,
                                stream));
  VT_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> sums(size_t(k), 0.0);
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t i = 0; i < k; ++i) sums[size_t(i)] += host[size_t(c * k + i)];
  return sums;
}

void take_columns(void* out, void* w, DType dtype, const int32_t* columns, int64_t count, int64_t n, int64_t k,
                  cudaStream_t stream) {
  VT_CHECK(count > 0 && count <= k, "take_columns: ", count, " of ", k, " columns");
  const unsigned blocks = unsigned(std::min<int64_t>((n * count + 255) / 256, 4096));
  VT_DISPATCH_ACT(dtype, T,
                  sm90_take_columns<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(out), static_cast<T*>(w), columns,
                                                                   n, k, count));
  VT_CUDA_CHECK_LAUNCH("sm90_take_columns");
}

bool exact_columns_supported(int64_t count) { return count > 0 && count % 8 == 0 && count <= kMaxColumns; }

void exact_columns_add(void* y, int64_t ldy, const void* x, const int32_t* columns, const void* w, int64_t m,
                       int64_t n, int64_t k, int64_t count, DType act, cudaStream_t stream) {
  VT_CHECK(exact_columns_supported(count), "exact_columns_add: ", count,
           " exact columns (a multiple of 8, at most ", kMaxColumns, ")");
  if (m == 0) return;
  const ::vt::trace::LaunchCost cost{
      "cuda", {m, n, count, 0}, double(n * count + 2 * m * n) * double(dtype_size(act)), 2.0 * double(m * n * count),
      ::vt::trace::OpGroup::kGemmLmHead};
  const dim3 grid(unsigned((n + kAddThreads - 1) / kAddThreads));
  VT_DISPATCH_ACT(act, T,
                  launch_exact_columns_add<T, kMaxColumns / 8>(cost, grid, stream, static_cast<T*>(y), ldy,
                                                               static_cast<const T*>(x), columns,
                                                               static_cast<const T*>(w), m, n, k, count));
}

}  // namespace vt::cuda
