// Design sweep for the small-M FP8 block-scaled GEMM (issue 6), standalone so one GPU call can
// time many shapes of kernel at once: a pure-read ceiling per size, the CUDA-core warp-per-column
// GEMV (vt's `gemv`) with its knobs, and a tensor-core GEMV whose warps own 8 columns and stream
// their weights with software-pipelined register loads. Every variant is checked against an f32
// reference before its time is printed. Build and run: scripts/gpu/gemv_explore.sh.
//
// Weights [n, k] e4m3 with [n/128, k/128] f32 scales, activations [m, k] e4m3 with [m, k/128]
// scales, y [m, n] f32. Times: a CUDA graph of back-to-back calls cycling over enough weight
// copies that every call reads from HBM (>= 400 MB), min over 3 replays, us per call.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e = (x);                                                                      \
    if (e != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace {

constexpr int kGroup = 128;

enum LoadKind { kLdcs = 0, kLdg = 1, kNc256 = 2, kNcNoAlloc = 3, kPlain = 4, kNoAlloc = 5 };
const char* load_name(int kind) {
  return kind == kLdcs ? "ldcs" : kind == kLdg ? "ldg" : kind == kNc256 ? "nc.L2::256B" : kind == kNcNoAlloc ? "nc.noalloc.256B"
         : kind == kPlain ? "plain" : "L1::no_allocate";
}

template <int kKind>
__device__ __forceinline__ uint4 load16(const uint8_t* p) {
  const uint4* q = reinterpret_cast<const uint4*>(p);
  if constexpr (kKind == kLdcs) return __ldcs(q);
  if constexpr (kKind == kLdg) return __ldg(q);
  if constexpr (kKind == kPlain) return *q;
  uint4 r;
  if constexpr (kKind == kNoAlloc)
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(q));
  else if constexpr (kKind == kNc256)
    asm volatile("ld.global.nc.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(q));
  else
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(q));
  return r;
}

__device__ __forceinline__ void fp8x16(const uint4& packed, float* out) {
  const __nv_fp8x4_e4m3* quads = reinterpret_cast<const __nv_fp8x4_e4m3*>(&packed);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float4 v = float4(quads[q]);
    out[4 * q] = v.x, out[4 * q + 1] = v.y, out[4 * q + 2] = v.z, out[4 * q + 3] = v.w;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// --- ceiling: read every byte once, nothing else ------------------------------------------
template <int kUnroll, int kKind>
__global__ void read_ceiling(const uint8_t* __restrict__ w, int64_t bytes, unsigned* sink) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * 16;
  uint32_t x = 0;
  for (int64_t base = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 16; base < bytes; base += stride * kUnroll) {
    uint4 r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t o = base + u * stride;
      r[u] = o < bytes ? load16<kKind>(w + o) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) x ^= r[u].x ^ r[u].y ^ r[u].z ^ r[u].w;
  }
  if (x == 0x9e3779b9u) atomicAdd(sink, 1u);
}

// --- reference ----------------------------------------------------------------------------
__global__ void reference(float* y, const uint8_t* a, const float* as, const uint8_t* w, const float* ws, int m,
                          int64_t n, int64_t k) {
  const int64_t col = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (col >= n) return;
  const int64_t kb = k / kGroup;
  for (int r = 0; r < m; ++r) {
    float acc = 0.0f;
    for (int64_t i = lane; i < k; i += 32) {
      const float wv = float(*reinterpret_cast<const __nv_fp8_e4m3*>(w + col * k + i));
      const float av = float(*reinterpret_cast<const __nv_fp8_e4m3*>(a + r * k + i));
      acc += wv * av * ws[(col / kGroup) * kb + i / kGroup] * as[r * kb + i / kGroup];
    }
    acc = warp_sum(acc);
    if (lane == 0) y[r * n + col] = acc;
  }
}

__device__ __forceinline__ void mma_e4m3(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// --- CUDA-core GEMV, M = 1: kCols columns per warp, kUnroll 16-byte loads per lane per column
// per round, the next round issued before this one is used; kSplit warps share a column group,
// each a contiguous slice of whole 512-byte pieces, meeting in shared memory in a fixed order.
template <int kWarps, int kUnroll, int kCols, int kKind, int kSplit = 1>
__global__ void __launch_bounds__(kWarps * 32) gemv_cc(float* __restrict__ y, const uint8_t* __restrict__ a,
                                                       const float* __restrict__ as, const uint8_t* __restrict__ w,
                                                       const float* __restrict__ ws, int64_t n, int64_t k) {
  constexpr int64_t kRound = int64_t(kUnroll) * 512;
  __shared__ float s_part[kWarps][kCols];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t col0 = (int64_t(blockIdx.x) * (kWarps / kSplit) + warp / kSplit) * kCols;
  const int slice = warp % kSplit;
  const int64_t pieces = k / 512, per = (pieces + kSplit - 1) / kSplit;
  const int64_t begin = min(k, slice * per * 512), end = min(k, (slice + 1) * per * 512);
  const int64_t kb = k / kGroup;
  float acc[kCols] = {};
  uint4 rw[kCols][kUnroll];
  const auto load_round = [&](int64_t round) {
#pragma unroll
    for (int c = 0; c < kCols; ++c)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t k0 = round + u * 512 + lane * 16;
        rw[c][u] = k0 < end && col0 + c < n ? load16<kKind>(w + (col0 + c) * k + k0) : make_uint4(0, 0, 0, 0);
      }
  };
  if (begin < end) load_round(begin);
  for (int64_t round = begin; round < end; round += kRound) {
    uint4 cur[kCols][kUnroll];
#pragma unroll
    for (int c = 0; c < kCols; ++c)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) cur[c][u] = rw[c][u];
    if (round + kRound < end) load_round(round + kRound);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k0 = round + u * 512 + lane * 16;
      if (k0 >= end) break;
      float af[16];
      fp8x16(*reinterpret_cast<const uint4*>(a + k0), af);
      const float a_scale = as[k0 / kGroup];
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        float wf[16];
        fp8x16(cur[c][u], wf);
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 16; ++e) dot += af[e] * wf[e];
        acc[c] += dot * a_scale * ws[(min(col0 + c, n - 1) / kGroup) * kb + k0 / kGroup];
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kCols; ++c) acc[c] = warp_sum(acc[c]);
  if constexpr (kSplit == 1) {
    if (lane < kCols && col0 + lane < n) {
      float v = acc[0];
#pragma unroll
      for (int c = 1; c < kCols; ++c) v = lane == c ? acc[c] : v;
      y[col0 + lane] = v;
    }
  } else {
    if (lane == 0)
#pragma unroll
      for (int c = 0; c < kCols; ++c) s_part[warp][c] = acc[c];
    __syncthreads();
    if (slice == 0 && lane < kCols && col0 + lane < n) {
      float v = 0.0f;
      for (int sl = 0; sl < kSplit; ++sl) v += s_part[warp + sl][lane];
      y[col0 + lane] = v;
    }
  }
}

// --- smem-staged tensor-core GEMV, M <= 16: each warp owns kTiles * 8 columns and a K slice; per
// round it reads 512 contiguous bytes of each of its rows (one 16-byte load per lane per row, the
// gemv's access pattern), stores them to its shared-memory tile, and feeds m16n8k32 MMAs from
// there (lane (g, q) reads 16 bytes of row g at chunk * 64 + q * 16; the activations with the same
// byte-to-k mapping from global memory). The next round's loads are issued before this round's MMAs.
template <int kTiles, int kWarps, int kSplit>
__global__ void __launch_bounds__(kWarps * 32) gemv_staged_mma(float* __restrict__ y, const uint8_t* __restrict__ a,
                                                              const float* __restrict__ as, const uint8_t* __restrict__ w,
                                                              const float* __restrict__ ws, int m, int64_t n, int64_t k) {
  constexpr int kRowsPerWarp = 8 * kTiles, kStride = 512 + 64;
  __shared__ __align__(16) uint8_t s_tile[kWarps][kRowsPerWarp][kStride];
  __shared__ float s_part[kWarps][kTiles][32][4];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int slice = warp % kSplit;
  const int64_t n0 = (int64_t(blockIdx.x) * (kWarps / kSplit) + warp / kSplit) * kRowsPerWarp;
  const int64_t pieces = k / 512, per = (pieces + kSplit - 1) / kSplit;
  const int64_t begin = min(pieces, slice * per), end = min(pieces, (slice + 1) * per);
  const int64_t kb = k / kGroup;
  uint4 rw[kRowsPerWarp];
  const auto load_round = [&](int64_t piece) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
      rw[r] = n0 + r < n ? __ldcs(reinterpret_cast<const uint4*>(w + (n0 + r) * k + piece * 512 + lane * 16))
                         : make_uint4(0, 0, 0, 0);
  };
  float acc[kTiles][4] = {};
  if (begin < end) load_round(begin);
  for (int64_t piece = begin; piece < end; ++piece) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) *reinterpret_cast<uint4*>(&s_tile[warp][r][lane * 16]) = rw[r];
    __syncwarp();
    if (piece + 1 < end) load_round(piece + 1);
#pragma unroll
    for (int b = 0; b < 4; ++b) {  // four 128-blocks per 512-byte piece
      const int64_t block = piece * 4 + b;
      float d[kTiles][4] = {};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t k0 = block * kGroup + h * 64 + q * 16;
        const uint4 a0 = g < m ? *reinterpret_cast<const uint4*>(a + int64_t(g) * k + k0) : make_uint4(0, 0, 0, 0);
        const uint4 a1 = g + 8 < m ? *reinterpret_cast<const uint4*>(a + int64_t(g + 8) * k + k0) : make_uint4(0, 0, 0, 0);
        const uint32_t af[4] = {a0.x, a1.x, a0.y, a1.y}, af2[4] = {a0.z, a1.z, a0.w, a1.w};
#pragma unroll
        for (int t = 0; t < kTiles; ++t) {
          const uint4 wv = *reinterpret_cast<const uint4*>(&s_tile[warp][t * 8 + g][b * 128 + h * 64 + q * 16]);
          const uint32_t bf[2] = {wv.x, wv.y}, bf2[2] = {wv.z, wv.w};
          mma_e4m3(d[t], af, bf);
          mma_e4m3(d[t], af2, bf2);
        }
      }
      const float s0 = g < m ? as[int64_t(g) * kb + block] : 0.0f;
      const float s1 = g + 8 < m ? as[int64_t(g + 8) * kb + block] : 0.0f;
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        const float w_scale = ws[(min(n0 + t * 8, n - 1) / kGroup) * kb + block];
        acc[t][0] += d[t][0] * s0 * w_scale, acc[t][1] += d[t][1] * s0 * w_scale;
        acc[t][2] += d[t][2] * s1 * w_scale, acc[t][3] += d[t][3] * s1 * w_scale;
      }
    }
    __syncwarp();
  }
  if constexpr (kSplit > 1) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) s_part[warp][t][lane][i] = acc[t][i];
    __syncthreads();
    if (slice != 0) return;
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float v = 0.0f;
        for (int sl = 0; sl < kSplit; ++sl) v += s_part[warp + sl][t][lane][i];
        acc[t][i] = v;
      }
  }
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = g + (i >= 2 ? 8 : 0);
      const int64_t c = n0 + t * 8 + 2 * q + (i % 2);
      if (row < m && c < n) y[int64_t(row) * n + c] = acc[t][i];
    }
}

// --- tensor-core GEMV, M <= 16: a warp owns 8 columns (one n8 tile) and 1/kSplit of K ---------
// Lane (g = lane / 4, q = lane % 4) loads 16 contiguous bytes of column g per 64-byte chunk; A is
// loaded with the same byte-to-k mapping (a permutation of k applied to both operands), so each
// m16n8k32 MMA pair consumes one chunk. kUnroll chunks per lane in flight, the next round's loads
// issued before this round's MMAs. kSplit warps of a block share the tile and meet in shared
// memory in a fixed order (deterministic).

template <int kTilesPerBlock, int kSplit, int kUnroll, int kKind>
__global__ void __launch_bounds__(kTilesPerBlock * kSplit * 32)
    gemv_mma(float* __restrict__ y, const uint8_t* __restrict__ a, const float* __restrict__ as,
             const uint8_t* __restrict__ w, const float* __restrict__ ws, int m, int64_t n, int64_t k) {
  static_assert(kUnroll % 2 == 0, "whole 128-blocks per round");
  __shared__ float s_part[kTilesPerBlock][kSplit][32][4];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int tile = warp / kSplit, slice = warp % kSplit;
  const int64_t n0 = (int64_t(blockIdx.x) * kTilesPerBlock + tile) * 8, col = n0 + g;
  const int64_t kb = k / kGroup;
  // Slice s: 128-blocks [s * per, min(kb, (s + 1) * per)), per rounded to whole rounds.
  constexpr int kBlocksPerRound = kUnroll / 2;
  const int64_t per = ((kb + kSplit - 1) / kSplit + kBlocksPerRound - 1) / kBlocksPerRound * kBlocksPerRound;
  const int64_t kb_begin = min(kb, int64_t(slice) * per), kb_end = min(kb, kb_begin + per);
  const bool col_ok = col < n;
  const uint8_t* wrow = w + (col_ok ? col : 0) * k;
  uint4 rw[kUnroll];
  const auto load_round = [&](int64_t block0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k0 = block0 * kGroup + u * 64 + q * 16;
      rw[u] = col_ok && block0 + u / 2 < kb_end ? load16<kKind>(wrow + k0) : make_uint4(0, 0, 0, 0);
    }
  };
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const float* wsr = ws + (n0 / kGroup) * kb;
  if (kb_begin < kb_end) load_round(kb_begin);
  for (int64_t block0 = kb_begin; block0 < kb_end; block0 += kBlocksPerRound) {
    uint4 cur[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) cur[u] = rw[u];
    if (block0 + kBlocksPerRound < kb_end) load_round(block0 + kBlocksPerRound);
#pragma unroll
    for (int b = 0; b < kBlocksPerRound; ++b) {
      const int64_t block = block0 + b;
      if (block >= kb_end) break;
      float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t k0 = block * kGroup + h * 64 + q * 16;
        const uint4 a0 = g < m ? *reinterpret_cast<const uint4*>(a + int64_t(g) * k + k0) : make_uint4(0, 0, 0, 0);
        const uint4 a1 = g + 8 < m ? *reinterpret_cast<const uint4*>(a + int64_t(g + 8) * k + k0) : make_uint4(0, 0, 0, 0);
        const uint4 wv = cur[2 * b + h];
        const uint32_t af[4] = {a0.x, a1.x, a0.y, a1.y}, bf[2] = {wv.x, wv.y};
        mma_e4m3(part, af, bf);
        const uint32_t af2[4] = {a0.z, a1.z, a0.w, a1.w}, bf2[2] = {wv.z, wv.w};
        mma_e4m3(part, af2, bf2);
      }
      const float w_scale = wsr[block];
      const float s0 = g < m ? as[int64_t(g) * kb + block] * w_scale : 0.0f;
      const float s1 = g + 8 < m ? as[int64_t(g + 8) * kb + block] * w_scale : 0.0f;
      acc[0] += part[0] * s0, acc[1] += part[1] * s0, acc[2] += part[2] * s1, acc[3] += part[3] * s1;
    }
  }
  if constexpr (kSplit > 1) {
#pragma unroll
    for (int i = 0; i < 4; ++i) s_part[tile][slice][lane][i] = acc[i];
    __syncthreads();
    if (slice != 0) return;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      acc[i] = s_part[tile][0][lane][i];
      for (int s = 1; s < kSplit; ++s) acc[i] += s_part[tile][s][lane][i];
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0);
    const int64_t c = n0 + 2 * q + (i % 2);
    if (row < m && c < n) y[int64_t(row) * n + c] = acc[i];
  }
}

// --- sweep MMA, M <= 16: a block owns 16 * kTiles weight rows; the weights are the MMA's A
// operand (16 output columns per m16n8k32), the activations its B (8 tokens per MMA, two MMAs for
// 16). Warp w takes 128-blocks w, w + kWarps, ... of K, so at each step the block reads
// kWarps * 128 contiguous bytes of each of its rows. Lane (g, q) loads 16 contiguous bytes at
// k = block * 128 + half * 64 + q * 16 of rows g and g + 8 (A) and of tokens g and g + 8 (B): the
// same byte-to-k permutation on both operands. Partials per 128-block are scaled in fp32 and the
// warps meet in shared memory in a fixed order.
template <int kTiles, int kWarps, int kKind>
__global__ void __launch_bounds__(kWarps * 32) gemv_sweep_mma(float* __restrict__ y, const uint8_t* __restrict__ a,
                                                             const float* __restrict__ as, const uint8_t* __restrict__ w,
                                                             const float* __restrict__ ws, int m, int64_t n, int64_t k) {
  __shared__ float s_part[kWarps][kTiles][32][8];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int64_t row0 = int64_t(blockIdx.x) * 16 * kTiles;
  const int64_t kb = k / kGroup;
  const bool two = m > 8;
  float acc[kTiles][8] = {};
  const auto load_w = [&](int tile, int r, int64_t k0) {
    const int64_t row = row0 + 16 * tile + r;
    return row < n ? load16<kKind>(w + row * k + k0) : make_uint4(0, 0, 0, 0);
  };
  uint4 rw[kTiles][2][2];  // [tile][half][row g, row g + 8]
  const auto load_block = [&](int64_t block) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t k0 = block * kGroup + h * 64 + q * 16;
        rw[t][h][0] = block < kb ? load_w(t, g, k0) : make_uint4(0, 0, 0, 0);
        rw[t][h][1] = block < kb ? load_w(t, g + 8, k0) : make_uint4(0, 0, 0, 0);
      }
  };
  load_block(warp);
  for (int64_t block = warp; block < kb; block += kWarps) {
    uint4 cur[kTiles][2][2];
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) cur[t][h][0] = rw[t][h][0], cur[t][h][1] = rw[t][h][1];
    if (block + kWarps < kb) load_block(block + kWarps);
    uint4 ab[2][2];  // [half][token g, token g + 8]
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t k0 = block * kGroup + h * 64 + q * 16;
      ab[h][0] = g < m ? *reinterpret_cast<const uint4*>(a + int64_t(g) * k + k0) : make_uint4(0, 0, 0, 0);
      ab[h][1] = g + 8 < m ? *reinterpret_cast<const uint4*>(a + int64_t(g + 8) * k + k0) : make_uint4(0, 0, 0, 0);
    }
    // D fragment: d0, d1 at (weight row g, tokens 2q, 2q + 1); d2, d3 at row g + 8.
    const float a_s0 = 2 * q < m ? as[int64_t(2 * q) * kb + block] : 0.0f;
    const float a_s1 = 2 * q + 1 < m ? as[int64_t(2 * q + 1) * kb + block] : 0.0f;
    const float a_s2 = 2 * q + 8 < m ? as[int64_t(2 * q + 8) * kb + block] : 0.0f;
    const float a_s3 = 2 * q + 9 < m ? as[int64_t(2 * q + 9) * kb + block] : 0.0f;
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      const float w_scale = ws[((row0 + 16 * t) / kGroup) * kb + block];
      float d0[4] = {0, 0, 0, 0}, d1[4] = {0, 0, 0, 0};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4 wg = cur[t][h][0], wg8 = cur[t][h][1];
        const uint32_t af[4] = {wg.x, wg8.x, wg.y, wg8.y}, af2[4] = {wg.z, wg8.z, wg.w, wg8.w};
        const uint32_t b0[2] = {ab[h][0].x, ab[h][0].y}, b0b[2] = {ab[h][0].z, ab[h][0].w};
        mma_e4m3(d0, af, b0);
        mma_e4m3(d0, af2, b0b);
        if (two) {
          const uint32_t b1[2] = {ab[h][1].x, ab[h][1].y}, b1b[2] = {ab[h][1].z, ab[h][1].w};
          mma_e4m3(d1, af, b1);
          mma_e4m3(d1, af2, b1b);
        }
      }
      acc[t][0] += d0[0] * a_s0 * w_scale, acc[t][1] += d0[1] * a_s1 * w_scale;
      acc[t][2] += d0[2] * a_s0 * w_scale, acc[t][3] += d0[3] * a_s1 * w_scale;
      acc[t][4] += d1[0] * a_s2 * w_scale, acc[t][5] += d1[1] * a_s3 * w_scale;
      acc[t][6] += d1[2] * a_s2 * w_scale, acc[t][7] += d1[3] * a_s3 * w_scale;
    }
  }
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int i = 0; i < 8; ++i) s_part[warp][t][lane][i] = acc[t][i];
  __syncthreads();
  // Thread (tile, lane, i) of the first kTiles * 256 threads sums one output over the warps.
  for (int o = threadIdx.x; o < kTiles * 256; o += kWarps * 32) {
    const int t = o / 256, l = (o / 8) % 32, i = o % 8;
    float total = 0.0f;
    for (int v = 0; v < kWarps; ++v) total += s_part[v][t][l][i];
    const int lg = l / 4, lq = l % 4;
    const int64_t row = row0 + 16 * t + lg + ((i % 4) >= 2 ? 8 : 0);
    const int token = 2 * lq + (i % 2) + (i >= 4 ? 8 : 0);
    if (row < n && token < m) y[int64_t(token) * n + row] = total;
  }
}

// --- cp.async-staged tensor-core GEMV, M <= 16: a block of kWarps warps owns kRows weight rows
// and streams them through a kStages-deep shared-memory ring, 512 bytes of every row per stage
// (each warp copies kRows / kWarps rows, one 512-byte contiguous row piece per instruction, the
// gemv's access pattern, via cp.async.cg). Warp w computes 128-block w of each stage for all rows:
// lane (g, q) reads 16 bytes of row g at h * 64 + q * 16 (rows 576 bytes apart: conflict-free) and
// the activation codes with the same byte-to-k mapping; partials meet in shared memory in a fixed
// order.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(uint32_t(__cvta_generic_to_shared(dst))), "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

template <int kRows, int kStages, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) gemv_cpasync_mma(float* __restrict__ y, const uint8_t* __restrict__ a,
                                                               const float* __restrict__ as, const uint8_t* __restrict__ w,
                                                               const float* __restrict__ ws, int m, int64_t n, int64_t k) {
  constexpr int kTiles = kRows / 8, kStride = 576, kBlocksPerStage = 4;
  static_assert(kWarps == kBlocksPerStage, "one 128-block of each stage per warp");
  __shared__ __align__(128) uint8_t s_ring[kStages][kRows][kStride];
  __shared__ float s_part[kWarps][kTiles][32][4];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int64_t n0 = int64_t(blockIdx.x) * kRows, pieces = k / 512, kb = k / kGroup;
  const auto issue = [&](int64_t piece) {
    if (piece < pieces) {
      const int stage = int(piece % kStages);
#pragma unroll
      for (int r = warp; r < kRows; r += kWarps) {
        const int64_t row = min(n0 + r, n - 1);
        cp_async16(&s_ring[stage][r][lane * 16], w + row * k + piece * 512 + lane * 16);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int p = 0; p < kStages - 1; ++p) issue(p);
  float acc[kTiles][4] = {};
  for (int64_t piece = 0; piece < pieces; ++piece) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage `piece` landed for every warp; stage piece - 1 is free again
    issue(piece + kStages - 1);
    const int stage = int(piece % kStages);
    const int64_t block = piece * kBlocksPerStage + warp;
    float d[kTiles][4] = {};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t k0 = block * kGroup + h * 64 + q * 16;
      const uint4 a0 = g < m ? *reinterpret_cast<const uint4*>(a + int64_t(g) * k + k0) : make_uint4(0, 0, 0, 0);
      const uint4 a1 = g + 8 < m ? *reinterpret_cast<const uint4*>(a + int64_t(g + 8) * k + k0) : make_uint4(0, 0, 0, 0);
      const uint32_t af[4] = {a0.x, a1.x, a0.y, a1.y}, af2[4] = {a0.z, a1.z, a0.w, a1.w};
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        const uint4 wv = *reinterpret_cast<const uint4*>(&s_ring[stage][t * 8 + g][warp * 128 + h * 64 + q * 16]);
        const uint32_t bf[2] = {wv.x, wv.y}, bf2[2] = {wv.z, wv.w};
        mma_e4m3(d[t], af, bf);
        mma_e4m3(d[t], af2, bf2);
      }
    }
    const float s0 = g < m ? as[int64_t(g) * kb + block] : 0.0f;
    const float s1 = g + 8 < m ? as[int64_t(g + 8) * kb + block] : 0.0f;
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      const float w_scale = ws[(min(n0 + t * 8, n - 1) / kGroup) * kb + block];
      acc[t][0] += d[t][0] * s0 * w_scale, acc[t][1] += d[t][1] * s0 * w_scale;
      acc[t][2] += d[t][2] * s1 * w_scale, acc[t][3] += d[t][3] * s1 * w_scale;
    }
  }
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) s_part[warp][t][lane][i] = acc[t][i];
  __syncthreads();
  for (int o = threadIdx.x; o < kTiles * 128; o += kWarps * 32) {
    const int t = o / 128, l = (o / 4) % 32, i = o % 4;
    float total = 0.0f;
    for (int v = 0; v < kWarps; ++v) total += s_part[v][t][l][i];
    const int row = l / 4 + (i >= 2 ? 8 : 0);
    const int64_t c = n0 + t * 8 + 2 * (l % 4) + (i % 2);
    if (row < m && c < n) y[int64_t(row) * n + c] = total;
  }
}

// --- harness ------------------------------------------------------------------------------
struct Shape {
  const char* name;
  int64_t n, k;
};

uint32_t hash32(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
  return uint32_t(x);
}

std::vector<uint8_t> random_codes(size_t count, uint64_t seed) {
  std::vector<uint8_t> v(count);
  for (size_t i = 0; i < count; ++i) {
    uint8_t c = uint8_t(hash32(seed * 0x9e3779b97f4a7c15ull + i));
    if ((c & 0x7f) == 0x7f) c &= 0xfe;  // no NaN codes
    if ((c & 0x78) == 0x78) c &= 0xf7;  // keep magnitudes <= 240 so sums stay tame
    v[i] = c;
  }
  return v;
}

struct Runner {
  cudaStream_t stream;
  double bandwidth_gbs = 0;
  // us per call over `calls` back-to-back calls in one graph, min of 3 replays.
  double time(int calls, const std::function<void(int)>& call) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < calls; ++i) call(i);
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    float best = 1e30f;
    for (int rep = 0; rep < 3; ++rep) {
      CHECK(cudaEventRecord(start, stream));
      CHECK(cudaGraphLaunch(exec, stream));
      CHECK(cudaEventRecord(stop, stream));
      CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, start, stop));
      best = std::min(best, ms);
    }
    CHECK(cudaGetLastError());
    cudaEventDestroy(start), cudaEventDestroy(stop);
    cudaGraphExecDestroy(exec), cudaGraphDestroy(graph);
    return 1000.0 * best / calls;
  }
};

struct Result {
  std::string shape, variant;
  double us, gbs, pct;
  float err;
};

}  // namespace

int main(int argc, char** argv) {
  const std::vector<Shape> shapes = {{"gate_up", 34816, 5120}, {"gdn_in", 16384, 5120}, {"qkv", 14336, 5120},
                                     {"down", 5120, 17408},    {"o_proj", 5120, 6144}};
  const int m_max = 16;
  std::vector<int> ms = {1, 16};
  if (argc > 1) ms = {std::atoi(argv[1])};
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  Runner runner;
  CHECK(cudaStreamCreateWithFlags(&runner.stream, cudaStreamNonBlocking));
  unsigned* sink;
  CHECK(cudaMalloc(&sink, 4));
  // Read bandwidth on 4 GB (what vt measures at start-up).
  {
    const int64_t bytes = int64_t(4) << 30;
    uint8_t* big;
    CHECK(cudaMalloc(&big, bytes));
    CHECK(cudaMemset(big, 1, bytes));
    const double us = runner.time(3, [&](int) { read_ceiling<4, kLdcs><<<sms * 8, 256, 0, runner.stream>>>(big, bytes, sink); });
    runner.bandwidth_gbs = double(bytes) / us / 1e3;
    CHECK(cudaFree(big));
    std::printf("read bandwidth (4 GB, ldcs): %.0f GB/s on %s (%d SMs)\n", runner.bandwidth_gbs, prop.name, sms);
  }
  std::vector<Result> results;
  for (const Shape& s : shapes) {
    const int64_t wbytes = s.n * s.k, kb = s.k / kGroup, nb = (s.n + kGroup - 1) / kGroup;
    const int copies = int(std::max<int64_t>(2, (int64_t(400) << 20) / wbytes + 1));
    std::vector<uint8_t*> w(copies);
    std::vector<float*> ws(copies);
    const std::vector<uint8_t> host_w = random_codes(size_t(wbytes), 1);
    std::vector<float> host_ws(size_t(nb * kb));
    for (size_t i = 0; i < host_ws.size(); ++i) host_ws[i] = 1e-3f * (1 + hash32(i + 77) % 1000) / 1000.0f;
    for (int c = 0; c < copies; ++c) {
      CHECK(cudaMalloc(&w[c], wbytes));
      CHECK(cudaMalloc(&ws[c], host_ws.size() * 4));
      CHECK(cudaMemcpy(w[c], host_w.data(), wbytes, cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(ws[c], host_ws.data(), host_ws.size() * 4, cudaMemcpyHostToDevice));
    }
    uint8_t* a;
    float *as, *y, *yref;
    const std::vector<uint8_t> host_a = random_codes(size_t(m_max * s.k), 2);
    std::vector<float> host_as(size_t(m_max * kb));
    for (size_t i = 0; i < host_as.size(); ++i) host_as[i] = 1e-2f * (1 + hash32(i + 99) % 1000) / 1000.0f;
    CHECK(cudaMalloc(&a, host_a.size()));
    CHECK(cudaMalloc(&as, host_as.size() * 4));
    CHECK(cudaMalloc(&y, size_t(m_max) * s.n * 4));
    CHECK(cudaMalloc(&yref, size_t(m_max) * s.n * 4));
    CHECK(cudaMemcpy(a, host_a.data(), host_a.size(), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(as, host_as.data(), host_as.size() * 4, cudaMemcpyHostToDevice));
    const double mb = double(wbytes) / 1e6;
    const auto record = [&](int m, const std::string& name, double us, float err) {
      const double gbs = double(wbytes) / us / 1e3;
      results.push_back({std::string(s.name) + " m" + std::to_string(m), name, us, gbs, 100.0 * gbs / runner.bandwidth_gbs, err});
    };
    // Ceiling for this many bytes: grid-stride read, 8 blocks of 256 per SM.
    const auto ceiling = [&](auto kernel, const char* name, int blocks_per_sm) {
      const double us = runner.time(30, [&](int i) { kernel<<<sms * blocks_per_sm, 256, 0, runner.stream>>>(w[i % copies], wbytes, sink); });
      for (int m : ms) record(m, name, us, 0.0f);
    };
    ceiling(read_ceiling<4, kLdcs>, "ceiling read u4 ldcs x8", 8);
    ceiling(read_ceiling<8, kLdcs>, "ceiling read u8 ldcs x4", 4);
    ceiling(read_ceiling<4, kNc256>, "ceiling read u4 nc256 x8", 8);
    for (int m : ms) {
      reference<<<unsigned((s.n + 7) / 8), 256, 0, runner.stream>>>(yref, a, as, w[0], ws[0], m, s.n, s.k);
      CHECK(cudaStreamSynchronize(runner.stream));
      std::vector<float> ref(size_t(m) * s.n), out(size_t(m) * s.n);
      CHECK(cudaMemcpy(ref.data(), yref, ref.size() * 4, cudaMemcpyDeviceToHost));
      float ref_max = 0;
      for (float v : ref) ref_max = std::max(ref_max, std::fabs(v));
      const auto check = [&]() {
        CHECK(cudaMemset(y, 0xff, size_t(m) * s.n * 4));
        return [&]() {
          CHECK(cudaMemcpy(out.data(), y, out.size() * 4, cudaMemcpyDeviceToHost));
          float err = 0;
          for (size_t i = 0; i < out.size(); ++i) err = std::max(err, std::fabs(out[i] - ref[i]));
          return std::isnan(err) ? 1e30f : err / std::max(ref_max, 1e-20f);
        };
      };
      const auto run = [&](const std::string& name, const std::function<void(int)>& call) {
        auto finish = check();
        call(0);
        CHECK(cudaStreamSynchronize(runner.stream));
        CHECK(cudaGetLastError());
        const float err = finish();
        record(m, name, runner.time(30, call), err);
      };
      if (m == 1) {
#define CC(W, U, C, L, S)                                                                                       \
  run("cc w" #W " u" #U " c" #C " s" #S " " + std::string(load_name(L)), [&](int i) {                          \
    gemv_cc<W, U, C, L, S><<<unsigned((s.n + (W / S) * C - 1) / ((W / S) * C)), W * 32, 0, runner.stream>>>(     \
        y, a, as, w[i % copies], ws[i % copies], s.n, s.k);                                                    \
  })
        CC(8, 4, 1, kLdcs, 1);  // vt's gemv today
        CC(4, 1, 2, kLdcs, 1);  // the last sweep's best
        CC(4, 2, 2, kLdcs, 1);
        CC(4, 1, 2, kPlain, 1);
        CC(4, 1, 2, kNoAlloc, 1);
        CC(2, 1, 2, kLdcs, 1);
        CC(8, 1, 2, kLdcs, 1);
        CC(2, 1, 4, kLdcs, 1);
        CC(4, 1, 4, kLdcs, 1);
        CC(8, 1, 4, kLdcs, 1);
        CC(4, 1, 8, kLdcs, 1);
        CC(4, 2, 4, kLdcs, 1);
        CC(8, 1, 2, kLdcs, 2);
        CC(8, 1, 2, kLdcs, 4);
        CC(8, 1, 4, kLdcs, 2);
        CC(8, 1, 4, kLdcs, 4);
        CC(8, 1, 4, kLdcs, 8);
        CC(4, 1, 4, kLdcs, 2);
#undef CC
      }
#define MMA(T, S, U, L)                                                                                           \
  run("mma t" #T " s" #S " u" #U " " + std::string(load_name(L)), [&](int i) {                                   \
    gemv_mma<T, S, U, L><<<unsigned((s.n + 8 * T - 1) / (8 * T)), T * S * 32, 0, runner.stream>>>(             \
        y, a, as, w[i % copies], ws[i % copies], m, s.n, s.k);                                                 \
  })
      MMA(1, 8, 2, kLdcs);
#undef MMA
#define SWM(T, W, L)                                                                                              \
  run("sweep_mma t" #T " w" #W " " + std::string(load_name(L)), [&](int i) {                                    \
    gemv_sweep_mma<T, W, L><<<unsigned((s.n + 16 * T - 1) / (16 * T)), W * 32, 0, runner.stream>>>(              \
        y, a, as, w[i % copies], ws[i % copies], m, s.n, s.k);                                                 \
  })
      SWM(2, 4, kLdcs);
#undef SWM
#define STG(T, W, S)                                                                                              \
  run("staged_mma t" #T " w" #W " s" #S, [&](int i) {                                                           \
    gemv_staged_mma<T, W, S><<<unsigned((s.n + 8 * T * (W / S) - 1) / (8 * T * (W / S))), W * 32, 0, runner.stream>>>( \
        y, a, as, w[i % copies], ws[i % copies], m, s.n, s.k);                                                 \
  })
      STG(1, 4, 1);
      STG(1, 8, 1);
      STG(2, 4, 1);
      STG(1, 8, 2);
      STG(1, 8, 4);
      STG(2, 8, 2);
      STG(2, 8, 4);
      STG(1, 4, 4);
#undef STG
#define CPA(R, S)                                                                                                 \
  run("cpasync_mma r" #R " s" #S, [&](int i) {                                                                  \
    gemv_cpasync_mma<R, S, 4><<<unsigned((s.n + R - 1) / R), 128, 0, runner.stream>>>(y, a, as, w[i % copies],   \
                                                                                   ws[i % copies], m, s.n, s.k); \
  })
      CPA(8, 3);
      CPA(8, 4);
      CPA(8, 6);
      CPA(16, 3);
      CPA(16, 4);
      CPA(32, 3);
#undef CPA
    }
    for (int c = 0; c < copies; ++c) cudaFree(w[c]), cudaFree(ws[c]);
    cudaFree(a), cudaFree(as), cudaFree(y), cudaFree(yref);
    std::fprintf(stderr, "done %s (%.1f MB x %d copies)\n", s.name, mb, copies);
  }
  std::printf("\n| shape | variant | us | GB/s | %% of read bw | max err / max |ref| |\n|---|---|---|---|---|---|\n");
  for (const Result& r : results)
    std::printf("| %s | %s | %.2f | %.0f | %.1f%% | %s |\n", r.shape.c_str(), r.variant.c_str(), r.us, r.gbs, r.pct,
                r.err > 1e-3f ? (std::to_string(r.err) + " WRONG").c_str() : std::to_string(r.err).c_str());
  // Best per shape.
  std::printf("\n| shape | best variant | us | %% of read bw | best ceiling %% |\n|---|---|---|---|---|\n");
  std::vector<std::string> seen;
  for (const Result& r : results) {
    if (std::find(seen.begin(), seen.end(), r.shape) != seen.end()) continue;
    seen.push_back(r.shape);
    const Result* best = nullptr;
    double ceil = 0;
    for (const Result& o : results) {
      if (o.shape != r.shape) continue;
      if (o.variant.rfind("ceiling", 0) == 0) {
        ceil = std::max(ceil, o.pct);
        continue;
      }
      if (o.err > 1e-3f) continue;
      if (!best || o.us < best->us) best = &o;
    }
    if (best) std::printf("| %s | %s | %.2f | %.1f%% | %.1f%% |\n", r.shape.c_str(), best->variant.c_str(), best->us, best->pct, ceil);
  }
  return 0;
}
