// The block's first maximum, shared by the greedy argmax (argmax.cu) and sample_rows
// (sampling.cu): each thread brings its best (value, id), thread 0 gets the block's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace vt::cuda::device {

// (value, id) before (other_value, other_id): higher, or equal at a lower id. NaN never is.
__device__ __forceinline__ bool better(float value, int32_t id, float other_value,
                                       int32_t other_id) {
  return value > other_value || (value == other_value && id < other_id);
}

__device__ __forceinline__ void warp_argmax(float& value, int32_t& id) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, value, offset);
    const int32_t other_id = __shfl_xor_sync(0xffffffffu, id, offset);
    if (better(other, other_id, value, id)) value = other, id = other_id;
  }
}

// The block's best (value, id) of kWarps warps: highest value, ties to the lower id (a total
// order, so the result does not depend on the order the bests meet in); thread 0 gets the id.
// s_values and s_ids hold kWarps entries each.
template <int kWarps>
__device__ __forceinline__ int32_t block_argmax(float value, int32_t id, float* s_values,
                                                int32_t* s_ids) {
  static_assert(kWarps <= 32, "the warps' bests meet in one warp");
  warp_argmax(value, id);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // the arrays may still be read by a previous call
  if (lane == 0) s_values[warp] = value, s_ids[warp] = id;
  __syncthreads();
  if (warp == 0) {
    value = lane < kWarps ? s_values[lane] : -INFINITY;
    id = lane < kWarps ? s_ids[lane] : 0x7fffffff;
    warp_argmax(value, id);
  }
  return id;
}

}  // namespace vt::cuda::device
