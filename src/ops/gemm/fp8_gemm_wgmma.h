// The TMA + wgmma stream-K FP8 GEMM's host entry (kernels: fp8_gemm_wgmma.cuh), for fp8_gemm.cu's
// fp8_block_gemm (Fp8GemmBackend::kWgmma).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "core/dtype.h"
#include "ops/gemm/gemm.h"
#include "ops/gemm/partials.h"
#include "trace/intent.h"

namespace vt::cuda {

// Makes the partials workspace of the current device and `stream` (cudaMalloc: outside any graph
// capture; the first GEMM call on the stream makes it otherwise, and refuses inside a capture).
void fp8_gemm_wgmma_prepare(cudaStream_t stream);
// Frees that workspace (the stream's work done), if any.
void fp8_gemm_wgmma_release(cudaStream_t stream);
// Launches per call: one per 64 rows.
int64_t fp8_gemm_wgmma_launches(int64_t m);
// As fp8_block_gemm; cost(rows) is what a launch of `rows` rows must move (its intent).
void fp8_gemm_wgmma(void* y, int64_t ldy, const uint8_t* q, const float* a_scales, const uint8_t* w,
                    const float* w_scales, int64_t m, int64_t n, int64_t k, DType act, cudaStream_t stream,
                    const std::function<::vt::trace::LaunchCost(int64_t rows)>& cost);

// The stream-K split with its sum left to the consumer: y [m, n] as fp32 partials (GemmPartials,
// partials.h) in the stream's workspace, valid until the next such call on the stream; m <= 64,
// n % 128 == 0 (fp8_gemm_wgmma_partials_serves, partials.h).
GemmPartials fp8_gemm_wgmma_partials(const uint8_t* q, const float* a_scales, const uint8_t* w,
                                     const float* w_scales, int64_t m, int64_t n, int64_t k, cudaStream_t stream,
                                     const ::vt::trace::LaunchCost& cost);

// The cluster split of the same kernel (Fp8GemmBackend::kWgmmaCluster): clusters of 2..8 CTAs,
// one per 128-row tile, where the tiles fill at most half the SMs (fp8_gemm_wgmma_cluster_serves,
// gemm.h, says where on the current device).
void fp8_gemm_wgmma_cluster(void* y, int64_t ldy, const uint8_t* q, const float* a_scales, const uint8_t* w,
                            const float* w_scales, int64_t m, int64_t n, int64_t k, DType act, cudaStream_t stream,
                            const std::function<::vt::trace::LaunchCost(int64_t rows)>& cost);

}  // namespace vt::cuda
