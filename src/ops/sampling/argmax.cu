// Greedy sampling on the device: the argmax of each logit row (lowest index on ties, NaN never).
#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"
#include "ops/sampling/block_argmax.cuh"
#include "ops/sampling/sampling.h"

namespace vt::cuda {
namespace {

// One block of kThreads a row, 16-byte loads, kInFlight of them issued before a thread compares:
// the 256-thread version with 2-byte loads walked the 35B-A3B's 248,320 bf16 logits in 970
// dependent rounds, 54 us of a 2.7 ms batch-1 step (docs/perf/2026-12-08-moe-batch1.md). Rows run
// side by side on their own SMs.
constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kInFlight = 4;

// Thread t takes the groups of 8 logits t, t + kThreads, ... (vector: 16-byte aligned rows, vocab
// a multiple of 8), else the single logits t, t + kThreads, ...; in ascending order, so a thread
// keeps its first maximum, and block_argmax breaks ties by index: the row's first maximum.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    sm90_argmax_rows(int32_t* __restrict__ g_out, const T* __restrict__ g_logits, int64_t vocab,
                     bool vector) {
  __shared__ float s_value[kWarps];
  __shared__ int32_t s_index[kWarps];
  device::pdl_enter();
  const T* row = g_logits + int64_t(blockIdx.x) * vocab;
  float best = -INFINITY;
  int32_t best_index = INT_MAX;
  if (vector) {
    const int64_t groups = vocab / 8;
    for (int64_t first = threadIdx.x; first < groups; first += kInFlight * kThreads) {
      device::Packed8<T> r_packed[kInFlight];
#pragma unroll
      for (int j = 0; j < kInFlight; ++j)
        if (first + j * kThreads < groups)
          device::load_packed8(row + (first + j * kThreads) * 8, r_packed[j]);
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        const int64_t group = first + j * kThreads;
        if (group >= groups) break;
        float r_x[8];
        device::unpack8(r_packed[j], r_x);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (r_x[e] > best) best = r_x[e], best_index = int32_t(group * 8 + e);
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      const float value = device::to_float(row[i]);
      if (value > best) best = value, best_index = int32_t(i);
    }
  }
  const int32_t id = device::block_argmax<kWarps>(best, best_index, s_value, s_index);
  if (threadIdx.x == 0) g_out[blockIdx.x] = id == INT_MAX ? 0 : id;
}

}  // namespace

void argmax_rows(int32_t* out, const void* logits, int64_t rows, int64_t vocab, DType act,
                 cudaStream_t stream) {
  if (rows == 0) return;
  VT_CHECK(rows <= INT_MAX && vocab > 0 && vocab <= INT_MAX, "argmax_rows: ", rows, " rows of ",
           vocab);
  const bool vector = vocab % 8 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  VT_DISPATCH_ACT(
      act, T,
      launch("sm90_argmax_rows",
             ::vt::trace::LaunchCost{"cuda",
                                     {rows, vocab, 0, 0},
                                     double(rows) * double(vocab) * double(dtype_size(act)),
                                     0,
                                     ::vt::trace::OpGroup::kSampling},
             sm90_argmax_rows<T>, dim3(unsigned(rows)), dim3(kThreads), 0, stream, out,
             static_cast<const T*>(logits), vocab, vector));
}

}  // namespace vt::cuda
