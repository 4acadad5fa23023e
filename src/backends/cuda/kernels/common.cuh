// Device helpers shared by the kernels: activation-type conversion and warp/block reductions.
// Device code only; no engine headers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace vt::cuda::device {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}
__device__ __forceinline__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// Sum over the block; every thread gets the total. s_scratch holds >= blockDim.x / 32 floats.
// The order of additions is fixed by the block shape, so results are bit-reproducible.
__device__ __forceinline__ float block_sum(float value, float* s_scratch) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  value = warp_sum(value);
  __syncthreads();  // s_scratch may still be read by a previous call
  if (lane == 0) s_scratch[warp] = value;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += s_scratch[w];
  return total;
}

// 16 e4m3 codes (one 16-byte load) to f32.
__device__ __forceinline__ void fp8x16_to_float(const uint4& packed, float* out) {
  const __nv_fp8x4_e4m3* quads = reinterpret_cast<const __nv_fp8x4_e4m3*>(&packed);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float4 values = float4(quads[q]);
    out[4 * q + 0] = values.x;
    out[4 * q + 1] = values.y;
    out[4 * q + 2] = values.z;
    out[4 * q + 3] = values.w;
  }
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }
__device__ __forceinline__ float silu(float x) { return x / (1.0f + __expf(-x)); }

}  // namespace vt::cuda::device

// Dispatches a templated launch on the activation dtype (f32 or bf16).
#define VT_DISPATCH_ACT(dtype, T, ...)                                      \
  do {                                                                      \
    if ((dtype) == ::vt::DType::kF32) {                                     \
      using T = float;                                                      \
      __VA_ARGS__;                                                          \
    } else if ((dtype) == ::vt::DType::kBF16) {                             \
      using T = __nv_bfloat16;                                              \
      __VA_ARGS__;                                                          \
    } else {                                                                \
      VT_FAIL("activation dtype ", ::vt::dtype_name(dtype), " not supported"); \
    }                                                                       \
  } while (0)
