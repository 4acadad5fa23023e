// The m16n8k32 e4m3 MMA step shared by the FP8 mma GEMM (fp8_gemm.cu) and the MoE grouped GEMV
// (ops/moe/moe.cu). Operands: lane (group g, quad q) holds 16 contiguous bytes of weight row g (B,
// column g) and of A rows g and g + 8 per 64-byte chunk of K, the same byte-to-k mapping for both,
// so each dot product is an exact permutation of the true one; block scales are applied per
// 128-wide K block in fp32.
#pragma once

#include <cstdint>

namespace vt::cuda {

__device__ __forceinline__ void mma_e4m3(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// This lane's 16 bytes of a row at byte k0, zeros past K or for a missing row (null).
__device__ __forceinline__ uint4 fp8_row_chunk(const uint8_t* row, int64_t k0, int64_t k) {
  return row && k0 < k ? *reinterpret_cast<const uint4*>(row + k0) : make_uint4(0, 0, 0, 0);
}

// Adds one 128-wide K block (`block`: the step's chunks 2 * step and 2 * step + 1) of a 16-row
// tile to acc, times its scales (row g, row g + 8). The first tile's A chunks came in with the
// weights (r_a0, r_a1); other tiles load theirs here from row0 / row1 (L2-resident by then).
__device__ __forceinline__ void fp8_mma_tile_block(float* acc, const uint4* r_w, const uint4* r_a0,
                                                   const uint4* r_a1, bool first_tile, const uint8_t* row0,
                                                   const uint8_t* row1, int step, int64_t block, int64_t k,
                                                   int quad, float scale0, float scale1) {
  float r_block[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int chunk = 2 * step + half;
    uint4 a0 = r_a0[chunk], a1 = r_a1[chunk];
    if (!first_tile) {
      const int64_t k0 = block * 128 + half * 64 + quad * 16;
      a0 = fp8_row_chunk(row0, k0, k);
      a1 = fp8_row_chunk(row1, k0, k);
    }
    const uint32_t a_first[4] = {a0.x, a1.x, a0.y, a1.y};
    const uint32_t b_first[2] = {r_w[chunk].x, r_w[chunk].y};
    mma_e4m3(r_block, a_first, b_first);
    const uint32_t a_second[4] = {a0.z, a1.z, a0.w, a1.w};
    const uint32_t b_second[2] = {r_w[chunk].z, r_w[chunk].w};
    mma_e4m3(r_block, a_second, b_second);
  }
  acc[0] += r_block[0] * scale0;
  acc[1] += r_block[1] * scale0;
  acc[2] += r_block[2] * scale1;
  acc[3] += r_block[3] * scale1;
}

}  // namespace vt::cuda
