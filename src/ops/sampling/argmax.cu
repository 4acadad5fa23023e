// Greedy sampling on the device: the argmax of each logit row (lowest index on ties).
#include <cuda_bf16.h>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"
#include "ops/sampling/sampling.h"

namespace vt::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row; each thread keeps its best (value, index), then a fixed-order reduction.
template <typename T>
__global__ void sm90_argmax_rows(int32_t* __restrict__ g_out, const T* __restrict__ g_logits, int64_t vocab) {
  __shared__ float s_value[kThreads];
  __shared__ int32_t s_index[kThreads];
  device::pdl_enter();
  const T* row = g_logits + blockIdx.x * vocab;
  float best = -INFINITY;
  int32_t best_index = 0x7fffffff;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float value = device::to_float(row[i]);
    if (value > best) best = value, best_index = int32_t(i);  // ascending i: first max kept
  }
  s_value[threadIdx.x] = best;
  s_index[threadIdx.x] = best_index;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float other = s_value[threadIdx.x + stride];
      const int32_t other_index = s_index[threadIdx.x + stride];
      if (other > s_value[threadIdx.x] || (other == s_value[threadIdx.x] && other_index < s_index[threadIdx.x])) {
        s_value[threadIdx.x] = other;
        s_index[threadIdx.x] = other_index;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) g_out[blockIdx.x] = s_index[0] == 0x7fffffff ? 0 : s_index[0];
}

}  // namespace

void argmax_rows(int32_t* out, const void* logits, int64_t rows, int64_t vocab, DType act, cudaStream_t stream) {
  if (rows == 0) return;
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_argmax_rows",
                         ::vt::trace::LaunchCost{"cuda", {rows, vocab, 0, 0},
                                                   double(rows) * double(vocab) * double(dtype_size(act)), 0,
                                                   ::vt::trace::OpGroup::kSampling},
                         sm90_argmax_rows<T>, dim3(unsigned(rows)), dim3(kThreads), 0, stream, out,
                         static_cast<const T*>(logits), vocab));
}

}  // namespace vt::cuda
