// RMSNorm: one block per row, fp32 accumulation, warp-shuffle then shared-memory reduction.
#include "backends/cuda/check.h"
#include "backends/cuda/cuda_ops.h"

namespace vt::cuda {
namespace {

constexpr int kThreads = 256;
static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block is whole warps");

__device__ float block_sum(float value) {
  __shared__ float s_partial[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) s_partial[warp] = value;
  __syncthreads();
  value = lane < kThreads / 32 ? s_partial[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;  // every warp reduced the same partials: all threads hold the total
}

__global__ void sm90_f32_rms_norm(float* __restrict__ g_out, const float* __restrict__ g_x,
                                  const float* __restrict__ g_w, int64_t n, float eps, float weight_offset) {
  const float* row = g_x + blockIdx.x * n;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) sum += row[i] * row[i];
  __shared__ float s_scale;
  sum = block_sum(sum);
  if (threadIdx.x == 0) s_scale = rsqrtf(sum / float(n) + eps);
  __syncthreads();
  const float scale = s_scale;
  for (int64_t i = threadIdx.x; i < n; i += kThreads)
    g_out[blockIdx.x * n + i] = row[i] * scale * (weight_offset + g_w[i]);
}

}  // namespace

void rms_norm_f32(float* out, const float* x, const float* w, int64_t rows, int64_t n, float eps,
                  float weight_offset, cudaStream_t stream) {
  VT_CHECK(rows >= 0 && rows <= INT32_MAX && n > 0, "rms_norm_f32: rows ", rows, " n ", n);
  if (rows == 0) return;
  sm90_f32_rms_norm<<<unsigned(rows), kThreads, 0, stream>>>(out, x, w, n, eps, weight_offset);
  VT_CUDA_CHECK_LAUNCH("sm90_f32_rms_norm");
}

}  // namespace vt::cuda
