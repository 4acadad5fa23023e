// Weights into L2 ahead of their GEMM (cuda::prefetch_l2): bulk prefetches (cp.async.bulk.prefetch.L2,
// sm90) of kChunk bytes each, spread over up to one warp per SM so that no one SM's copy engine
// generates every request. Nothing is written and nothing waited on: the kernel ends once the
// requests are issued; the lines arrive while the stream it runs beside does latency-bound work.
#include <algorithm>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/kernels/common.cuh"
#include "profile/intent.h"

namespace vt::cuda {
namespace {

constexpr int64_t kChunk = 16 * 1024;

__global__ void __launch_bounds__(32) sm90_prefetch_l2(const uint8_t* __restrict__ g_data, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int64_t chunks = (bytes + kChunk - 1) / kChunk;
  for (int64_t i = int64_t(blockIdx.x) * 32 + threadIdx.x; i < chunks; i += int64_t(gridDim.x) * 32) {
    const int64_t begin = i * kChunk;
    const int64_t left = bytes - begin;
    const uint32_t size = uint32_t(left < kChunk ? left : kChunk) & ~15u;  // whole 16-byte units
    if (size > 0)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(g_data + begin), "r"(size) : "memory");
  }
#endif
}

}  // namespace

void prefetch_l2(const void* data, int64_t bytes, cudaStream_t stream) {
  VT_CHECK(bytes >= 0 && reinterpret_cast<uintptr_t>(data) % 16 == 0, "prefetch_l2: ", bytes,
           " bytes at an address not 16-byte aligned");
  if (bytes < 16) return;
  static const int sms = [] {
    int device = 0, count = 0;
    VT_CUDA_CHECK(cudaGetDevice(&device));
    VT_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  const int64_t chunks = (bytes + kChunk - 1) / kChunk;
  const int blocks = int(std::min<int64_t>(sms, (chunks + 31) / 32 * 4));  // >= 8 chunks per warp before all SMs
  // A plain launch (no programmatic serialization): it runs on a side stream after an event, and
  // must not start before the work that event marks.
  sm90_prefetch_l2<<<std::max(blocks, 1), 32, 0, stream>>>(static_cast<const uint8_t*>(data), bytes);
  VT_CUDA_CHECK(cudaGetLastError());
  // Its bytes are the GEMM's, counted there (they move once, from HBM into L2): none here.
  profile::intend("sm90_prefetch_l2", {"cuda", {bytes, 0, 0, 0}, 0.0, 0.0, profile::OpGroup::kOther});
}

}  // namespace vt::cuda
