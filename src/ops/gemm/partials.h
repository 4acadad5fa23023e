// A GEMM output left as its stream-K split's partials for the norm after it to sum.
#pragma once

#include <cstdint>

namespace vt::cuda {

// A GEMM output [rows, n] left as the stream-K split's fp32 partials (fp8_gemm_wgmma_partials): the
// consumer adds each tile's shares in the order the GEMM's own sum would (fp8_gemm_split.h), so
// the result is that GEMM's output bit for bit, without the GEMM's CTAs waiting on each other.
struct GemmPartials {
  const float* words = nullptr;  // slots of [rows][128] words, n / 128 x max_owners of them
  int32_t rows = 0, n = 0, k_blocks = 0, ctas = 0, max_owners = 0;
};
// Whether fp8_gemm_wgmma_partials serves an M x N x K GEMM on the current device.
bool fp8_gemm_wgmma_partials_serves(int64_t m, int64_t n, int64_t k);

}  // namespace vt::cuda
