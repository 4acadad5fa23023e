// RMSNorm with the residual add fused in: one block per row, fp32 accumulation, fixed
// reduction order (bit-reproducible).
#include "backends/cuda/check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/kernels/common.cuh"

namespace vt::cuda {
namespace {

constexpr int kThreads = 1024;  // one block per row: at decode a row is all the work there is

template <typename T>
__global__ void sm90_add_rms_norm(T* __restrict__ g_out, T* __restrict__ g_residual, const T* __restrict__ g_branch,
                                  const float* __restrict__ g_w, int64_t n, float eps, float weight_offset) {
  __shared__ float s_scratch[kThreads / 32];
  T* row = g_residual + blockIdx.x * n;
  const T* branch = g_branch ? g_branch + blockIdx.x * n : nullptr;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    float value = device::to_float(row[i]);
    if (branch) {
      value += device::to_float(branch[i]);
      row[i] = device::from_float<T>(value);
      value = device::to_float(row[i]);  // normalise what the residual stream holds
    }
    sum += value * value;
  }
  const float scale = rsqrtf(device::block_sum(sum, s_scratch) / float(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads)
    g_out[blockIdx.x * n + i] = device::from_float<T>(device::to_float(row[i]) * scale * (weight_offset + g_w[i]));
}

}  // namespace

void add_rms_norm(void* out, void* residual, const void* branch, const float* w, int64_t rows, int64_t n,
                  float eps, float weight_offset, DType act, cudaStream_t stream) {
  VT_CHECK(rows >= 0 && rows <= INT32_MAX && n > 0, "add_rms_norm: rows ", rows, " n ", n);
  VT_CHECK(out != residual, "add_rms_norm: out must not alias the residual");
  if (rows == 0) return;
  VT_DISPATCH_ACT(act, T,
                  sm90_add_rms_norm<T><<<unsigned(rows), kThreads, 0, stream>>>(
                      static_cast<T*>(out), static_cast<T*>(residual), static_cast<const T*>(branch), w, n,
                      eps, weight_offset));
  VT_CUDA_CHECK_LAUNCH("sm90_add_rms_norm");
}

void rms_norm_f32(float* out, const float* x, const float* w, int64_t rows, int64_t n, float eps,
                  float weight_offset, cudaStream_t stream) {
  add_rms_norm(out, const_cast<float*>(x), nullptr, w, rows, n, eps, weight_offset, DType::kF32, stream);
}

}  // namespace vt::cuda
