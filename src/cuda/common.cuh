// Device helpers shared by the kernels: activation-type conversion and warp/block reductions.
// Device code only; no engine headers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/dtype.h"
#include "core/error.h"

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

// Max over the block; every thread gets it. Same contract as block_sum.
__device__ __forceinline__ float block_max(float value, float* s_scratch) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  value = warp_max(value);
  __syncthreads();
  if (lane == 0) s_scratch[warp] = value;
  __syncthreads();
  float total = s_scratch[0];
  for (int w = 1; w < warps; ++w) total = fmaxf(total, s_scratch[w]);
  return total;
}

// Max over the 16 lanes of a half-warp (all 32 lanes must call it).
__device__ __forceinline__ float half_warp_max(float value) {
  for (int offset = 8; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// Programmatic dependent launch (sm90). Kernels launched through launch() (launch.cuh) may start
// while the previous kernel of the stream is still running: each must call pdl_wait() before it
// reads or writes anything an earlier kernel touches (only constant inputs such as weights may be
// read before), and calls pdl_trigger() to let the next kernel start early (pdl_enter: both).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Both, at the top of a kernel that has nothing to do before its inputs are ready: the wait, then
// the trigger, so that when a kernel starts, every kernel before its predecessor has finished
// (sm90_gdn_recurrent relies on it).
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_trigger();
}

__device__ __forceinline__ void prefetch_l2(const void* pointer) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(pointer));
}

// Eight consecutive activations (16-byte aligned for bf16, 32-byte for f32) to and from f32.
__device__ __forceinline__ void load8(const float* p, float* out) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float* out) {
  const uint4 packed = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&packed);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 value = __bfloat1622float2(pairs[i]);
    out[2 * i] = value.x, out[2 * i + 1] = value.y;
  }
}
// The same eight activations kept as loaded (16 bytes of bf16, 32 of f32) until they are used:
// twice as many bf16 loads in flight for the registers as load8's floats.
template <typename T>
struct Packed8;
template <>
struct Packed8<__nv_bfloat16> {
  uint4 bits;
};
template <>
struct Packed8<float> {
  float4 a, b;
};
__device__ __forceinline__ void load_packed8(const __nv_bfloat16* p, Packed8<__nv_bfloat16>& out) {
  out.bits = *reinterpret_cast<const uint4*>(p);
}
__device__ __forceinline__ void load_packed8(const float* p, Packed8<float>& out) {
  out.a = reinterpret_cast<const float4*>(p)[0], out.b = reinterpret_cast<const float4*>(p)[1];
}
__device__ __forceinline__ void unpack8(const Packed8<__nv_bfloat16>& in, float* out) {
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&in.bits);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 value = __bfloat1622float2(pairs[i]);
    out[2 * i] = value.x, out[2 * i + 1] = value.y;
  }
}
__device__ __forceinline__ void unpack8(const Packed8<float>& in, float* out) {
  out[0] = in.a.x, out[1] = in.a.y, out[2] = in.a.z, out[3] = in.a.w;
  out[4] = in.b.x, out[5] = in.b.y, out[6] = in.b.z, out[7] = in.b.w;
}
__device__ __forceinline__ void store8(float* p, const float* in) {
  reinterpret_cast<float4*>(p)[0] = make_float4(in[0], in[1], in[2], in[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(in[4], in[5], in[6], in[7]);
}
__device__ __forceinline__ void store8(__nv_bfloat16* p, const float* in) {
  uint4 packed;
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
  for (int i = 0; i < 4; ++i) pairs[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = packed;
}
// Rounds to the activation dtype and back (what a consumer reading the stored value sees).
__device__ __forceinline__ float round_to(float x, float*) { return x; }
__device__ __forceinline__ float round_to(float x, __nv_bfloat16*) { return __bfloat162float(__float2bfloat16_rn(x)); }

// FP8 activation quantisation of one 1x128 group spread over a half-warp, 8 values per lane
// (the CPU reference's rule: scale = max(absmax, 1e-10) / 448, code = e4m3(clamp(x / scale))).
// All 32 lanes must call it; lanes with store set write their 8 codes to q and, from the group's
// first lane (first), the scale.
__device__ __forceinline__ void quantize8_half_warp(const float* values, uint8_t* q, float* scale_out, bool store,
                                                    bool first) {
  float absmax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) absmax = fmaxf(absmax, fabsf(values[i]));
  absmax = half_warp_max(absmax);
  const float scale = fmaxf(absmax, 1e-10f) / 448.0f;
  uint2 packed;
  uint8_t* codes = reinterpret_cast<uint8_t*>(&packed);
#pragma unroll
  for (int i = 0; i < 8; ++i) codes[i] = __nv_fp8_e4m3(fminf(fmaxf(values[i] / scale, -448.0f), 448.0f)).__x;
  if (!store) return;
  *reinterpret_cast<uint2*>(q) = packed;
  if (first) *scale_out = scale;
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

namespace vt::cuda {

// A float dtype as the code device::load_any reads (f32, bf16, f16), for kernels that take any.
inline int dtype_code(DType dtype) {
  if (dtype == DType::kF32) return 0;
  if (dtype == DType::kBF16) return 1;
  if (dtype == DType::kF16) return 2;
  VT_FAIL("unsupported float dtype ", dtype_name(dtype));
}

namespace device {
__device__ __forceinline__ float load_any(const void* data, int dtype, int64_t i) {
  switch (dtype) {
    case 0: return static_cast<const float*>(data)[i];
    case 1: return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
    default: return __half2float(static_cast<const __half*>(data)[i]);
  }
}
}  // namespace device

}  // namespace vt::cuda
