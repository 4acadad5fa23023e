// Deterministic random fills (synthetic weights, benchmark states) and dtype conversion on the device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/device.h"

namespace vt::cuda {
namespace {

constexpr int kThreads = 256;


__device__ __forceinline__ uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void sm90_fill_random(void* g_data, int dtype, int64_t count, uint64_t seed, float scale, float offset) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const float unit = float(mix(seed * 0x100000001B3ull + uint64_t(i)) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    const float value = (2.0f * unit - 1.0f) * scale + offset;
    if (dtype == 0) static_cast<float*>(g_data)[i] = value;
    else static_cast<__nv_bfloat16*>(g_data)[i] = __float2bfloat16_rn(value);
  }
}

__global__ void sm90_fill_random_fp8(uint8_t* g_data, int64_t count, uint64_t seed) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    uint8_t code = uint8_t(mix(seed * 0x100000001B3ull + uint64_t(i)));
    if ((code & 0x7F) == 0x7F) code ^= 0x01;  // never NaN
    g_data[i] = code;
  }
}

template <typename T>
__global__ void sm90_convert(T* __restrict__ g_out, const void* g_in, int in_dtype, int64_t count) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    g_out[i] = device::from_float<T>(device::load_any(g_in, in_dtype, i));
}

unsigned grid_stride_blocks(int64_t count) {
  return unsigned(std::min<int64_t>((count + kThreads - 1) / kThreads, 132 * 16));
}

}  // namespace

void fill_random(void* data, DType dtype, int64_t count, uint64_t seed, float scale, float offset, cudaStream_t stream) {
  VT_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "fill_random: f32 or bf16 only");
  if (count == 0) return;
  sm90_fill_random<<<grid_stride_blocks(count), kThreads, 0, stream>>>(data, dtype == DType::kF32 ? 0 : 1, count,
                                                                        seed, scale, offset);
  VT_CUDA_CHECK_LAUNCH("sm90_fill_random");
}

void fill_random_fp8(uint8_t* data, int64_t count, uint64_t seed, cudaStream_t stream) {
  if (count == 0) return;
  sm90_fill_random_fp8<<<grid_stride_blocks(count), kThreads, 0, stream>>>(data, count, seed);
  VT_CUDA_CHECK_LAUNCH("sm90_fill_random_fp8");
}

void convert(void* out, DType out_dtype, const void* in, DType in_dtype, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  const int code = dtype_code(in_dtype);
  VT_DISPATCH_ACT(out_dtype, T,
                  sm90_convert<T><<<grid_stride_blocks(count), kThreads, 0, stream>>>(static_cast<T*>(out), in,
                                                                                      code, count));
  VT_CUDA_CHECK_LAUNCH("sm90_convert");
}

}  // namespace vt::cuda
