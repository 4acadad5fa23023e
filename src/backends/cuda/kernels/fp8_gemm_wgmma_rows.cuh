// FP8 block-scaled GEMM for M <= 64 per pass with no split of K: every CTA owns whole output
// columns (weight rows) and runs all of K for them, so no partial sums cross CTAs. The tile is
// kRows weight rows (a multiple of 8, not tied to the 128-row scale blocks), chosen per shape so
// that the tiles fill the SMs evenly (34816 rows: 256 tiles of 136, two per CTA; 14336: 128 of
// 112), and CTA c takes tiles c, c + C, ... of a grid of C <= SMs. Where it is faster than the
// stream-K kernel (fp8_gemm_wgmma.cuh) is measured, not assumed: the registry times both.
//
// The wgmma operands are the other way round from fp8_gemm_wgmma.cuh: the tokens are A (the
// instruction's 64 rows; with kTokens = 16 only the first 16 are real) and the weight rows are B
// (N = kRows), so a tile's width is free. A stage holds one 128-byte slice of K: the tokens' box
// (kTokens rows) and the tile's weight box (kRows rows), both by 2-D tensor copies with the
// 128-byte swizzle. With kTokens = 16 the A descriptor's rows 16..63 read whatever follows the
// box in shared memory (the weights, the next stage, the slack after the ring): their results
// land in accumulator rows 16..63, which warps 1..3 hold and never use.
//
// Per slice the consumer warpgroup runs four wgmma m64nNk32 (N = kRows) into a block
// accumulator and adds block x a_scale[token] x w_scale[row block] into fp32 totals (the block
// scales of the 1 x 128 / 128 x 128 format, per 128-K block as the CPU reference): a tile of up
// to 136 rows spans at most three 128-row scale blocks, each 8-column group lies in one. One
// producer warp issues the copies; weights are requested for the first stages before the
// programmatic-launch wait, tokens after it. Deterministic: every output is one CTA's sum in K order.
#pragma once

#include "backends/cuda/kernels/fp8_gemm_wgmma.cuh"

namespace vt::cuda::wgmma_gemm {

template <int kTokens, int kRows>
__host__ __device__ constexpr uint32_t rows_stage_bytes() {
  return uint32_t(kTokens + kRows) * kBlockK;
}
// K slices whose multiplies are issued together (independent accumulators, one wait): a slice's
// four dependent wgmma take ~0.5 us end to end, longer than a 5 KB slice takes to arrive.
template <int kRows>
__host__ __device__ constexpr int rows_batch() {
  return kRows <= 64 ? 4 : 2;
}
// Stages: about 96 KB of weights in flight per SM, within 180 KB of shared memory, 4..16 (and
// at least two batches).
template <int kTokens, int kRows>
__host__ __device__ constexpr int rows_stages() {
  constexpr int by_weights = (96 * 1024) / (kRows * kBlockK), by_room = (180 * 1024) / rows_stage_bytes<kTokens, kRows>();
  constexpr int stages = by_weights < by_room ? by_weights : by_room;
  constexpr int low = 2 * rows_batch<kRows>() > 4 ? 2 * rows_batch<kRows>() : 4;
  return stages < low ? low : stages > 16 ? 16 : stages;
}
// K slices per tile: the 128-wide K blocks, rounded up to whole batches (the copies of slices
// past K read zeros; their scales are zeros).
template <int kRows>
__host__ __device__ constexpr int64_t rows_k_slices(int64_t k) {
  return ((k + kBlockK - 1) / kBlockK + rows_batch<kRows>() - 1) / rows_batch<kRows>() * rows_batch<kRows>();
}
// Dynamic shared memory: the stages (1024-aligned), slack for the A rows past a 16-token box,
// the barriers, then the block scales: the tokens' [kTokens, slices] and, per tile of the CTA's,
// its (up to) three row blocks' [3, slices]; alignment slack.
template <int kTokens, int kRows>
__host__ __device__ constexpr size_t rows_ring_bytes() {
  return size_t(rows_stages<kTokens, kRows>()) * rows_stage_bytes<kTokens, kRows>() + (64 - kTokens) * kBlockK +
         2 * rows_stages<kTokens, kRows>() * sizeof(uint64_t);
}
template <int kTokens, int kRows>
inline size_t rows_shared_bytes(int64_t k, int64_t tiles_per_cta) {
  return rows_ring_bytes<kTokens, kRows>() + size_t(kTokens + 3 * tiles_per_cta) * rows_k_slices<kRows>(k) * sizeof(float) +
         1024;
}

template <typename T, int kTokens, int kRows>
__global__ void __launch_bounds__(kThreads, 1) sm90_fp8_gemm_wgmma_rows(
    const __grid_constant__ CUtensorMap weight_map, const __grid_constant__ CUtensorMap activation_map,
    T* __restrict__ g_y, int64_t ldy, const float* __restrict__ g_a_scales, const float* __restrict__ g_w_scales,
    int m, int n, int k) {
  static_assert(kTokens == 16 || kTokens == 64, "16 or 64 tokens per pass");
  static_assert(kRows % 8 == 0 && kRows >= 8 && kRows <= 136, "tiles of 8..136 weight rows");
  constexpr int kStages = rows_stages<kTokens, kRows>(), kBatch = rows_batch<kRows>();
  constexpr int kRegs = kRows / 2;   // the m64nNk32 accumulator per thread
  constexpr int kGroups = kRows / 8;  // 8-column groups, 4 registers each
  constexpr uint32_t kStageBytes = rows_stage_bytes<kTokens, kRows>(), kTokenBytes = kTokens * kBlockK;
  extern __shared__ uint8_t s_raw[];
  uint8_t* s_stages = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(s_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* s_full = reinterpret_cast<uint64_t*>(s_stages + size_t(kStages) * kStageBytes + (64 - kTokens) * kBlockK);
  uint64_t* s_empty = s_full + kStages;
  float* s_a_scales = reinterpret_cast<float*>(s_empty + kStages);  // [kTokens][slices]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t k_blocks = (k + kBlockK - 1) / kBlockK, slices = rows_k_slices<kRows>(k);
  const int64_t tiles = (n + kRows - 1) / kRows;
  const int64_t my_tiles = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int64_t units = my_tiles * slices;  // (tile, K slice) pairs, tile-major
  const auto tile_of = [&](int64_t unit) { return blockIdx.x + (unit / slices) * int64_t(gridDim.x); };

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(&s_full[s], 1);
      barrier_init(&s_empty[s], kConsumerThreads / 32);
    }
    device::barrier_init_fence();
  }
  __syncthreads();

  if (warp == kConsumerThreads / 32) {  // the producer
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&weight_map)) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&activation_map)) : "memory");
      const int64_t ahead = units < kStages ? units : kStages;
      // Weights are constant: the first stages' slices stream while the previous kernel drains.
      for (int64_t u = 0; u < ahead; ++u) {
        barrier_expect_bytes(&s_full[u], kStageBytes);
        tma_load_2d(s_stages + size_t(u) * kStageBytes + kTokenBytes, &weight_map, int32_t((u % slices) * kBlockK),
                    int32_t(tile_of(u) * kRows), &s_full[u]);
      }
      device::pdl_enter();
      for (int64_t u = 0; u < ahead; ++u)
        tma_load_2d(s_stages + size_t(u) * kStageBytes, &activation_map, int32_t((u % slices) * kBlockK), 0,
                    &s_full[u]);
      for (int64_t u = ahead; u < units; ++u) {
        const int s = int(u % kStages);
        barrier_wait(&s_empty[s], uint32_t((u / kStages - 1) & 1));
        barrier_expect_bytes(&s_full[s], kStageBytes);
        uint8_t* stage = s_stages + size_t(s) * kStageBytes;
        const int32_t x = int32_t((u % slices) * kBlockK);
        tma_load_2d(stage + kTokenBytes, &weight_map, x, int32_t(tile_of(u) * kRows), &s_full[s]);
        tma_load_2d(stage, &activation_map, x, 0, &s_full[s]);
      }
    }
    return;
  }

  // The consumer warpgroup. With 16 tokens only warp 0's accumulator rows are real.
  // The block scales go to shared memory first (a global load per slice would put its latency
  // on every slice's path): the weights' before the programmatic-launch wait (constant), the
  // tokens' after it; slices past K get zeros.
  const int64_t scale_blocks = (n + 127) / 128;
  float* s_w_scales = s_a_scales + kTokens * slices;  // [tile of the CTA's][3][slices]
  for (int64_t i = threadIdx.x; i < my_tiles * 3 * slices; i += kConsumerThreads) {
    const int64_t tile = blockIdx.x + (i / (3 * slices)) * int64_t(gridDim.x), q = (i / slices) % 3, kb = i % slices;
    const int64_t block = min((tile * kRows) / 128 + q, scale_blocks - 1);
    s_w_scales[i] = kb < k_blocks ? g_w_scales[block * k_blocks + kb] : 0.0f;
  }
  device::pdl_wait();
  for (int64_t i = threadIdx.x; i < kTokens * slices; i += kConsumerThreads) {
    const int64_t kb = i % slices;
    s_a_scales[i] = kb < k_blocks ? g_a_scales[min(i / slices, int64_t(m - 1)) * k_blocks + kb] : 0.0f;
  }
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumerThreads) : "memory");  // the consumer warps only
  const bool real = kTokens == 64 || warp == 0;
  const int quad = lane % 4;
  const int token0 = 16 * warp + lane / 4, token1 = token0 + 8;
  float r_total[kRegs];
  int r_block_of[kGroups];  // which of the tile's (up to three) scale blocks each column group is in
  const float* w_scales = s_w_scales;
  for (int64_t u0 = 0; u0 < units; u0 += kBatch) {
    const int64_t kb0 = u0 % slices, row0 = tile_of(u0) * kRows;
    if (kb0 == 0) {
      w_scales = s_w_scales + (u0 / slices) * 3 * slices;
#pragma unroll
      for (int j = 0; j < kGroups; ++j) r_block_of[j] = int((row0 + 8 * j) / 128 - row0 / 128);
#pragma unroll
      for (int r = 0; r < kRegs; ++r) r_total[r] = 0.0f;
    }
    // kBatch slices (one tile's: slices is a whole number of batches), one accumulator each.
    float r_block[kBatch][kRegs];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t u = u0 + b;
      barrier_wait(&s_full[u % kStages], uint32_t((u / kStages) & 1));
    }
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int step = 0; step < kBlockK / 32; ++step)
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const uint8_t* stage = s_stages + size_t((u0 + b) % kStages) * kStageBytes;
        wgmma_e4m3<kRows>(r_block[b], smem_descriptor(stage + step * 32),
                          smem_descriptor(stage + kTokenBytes + step * 32), step);
      }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
    for (int b = 0; b < kBatch; ++b) fence_registers<kRegs>(r_block[b]);
    __syncwarp();
    if (lane == 0)
#pragma unroll
      for (int b = 0; b < kBatch; ++b) barrier_arrive(&s_empty[(u0 + b) % kStages]);
    if (real) {
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int64_t kb = kb0 + b;
        const float a0 = s_a_scales[token0 * slices + kb], a1 = s_a_scales[token1 * slices + kb];
        const float w0 = w_scales[kb], w1 = w_scales[slices + kb], w2 = w_scales[2 * slices + kb];
        const float s0 = w0 * a0, s1 = w1 * a0, s2 = w2 * a0, t0 = w0 * a1, t1 = w1 * a1, t2 = w2 * a1;
#pragma unroll
        for (int j = 0; j < kGroups; ++j) {
          const int block = r_block_of[j];
          const float low = block == 0 ? s0 : block == 1 ? s1 : s2, high = block == 0 ? t0 : block == 1 ? t1 : t2;
          r_total[4 * j] += r_block[b][4 * j] * low;
          r_total[4 * j + 1] += r_block[b][4 * j + 1] * low;
          r_total[4 * j + 2] += r_block[b][4 * j + 2] * high;
          r_total[4 * j + 3] += r_block[b][4 * j + 3] * high;
        }
      }
    }
    if (kb0 + kBatch != slices || !real) continue;
    // The tile is done: register 4j + 2h + e is token (token0, token1)[h], column row0 + 8j + 2 quad + e.
#pragma unroll
    for (int j = 0; j < kGroups; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t column = row0 + 8 * j + 2 * quad + e;
          const int token = h == 0 ? token0 : token1;
          if (column < n && token < m) g_y[token * ldy + column] = device::from_float<T>(r_total[4 * j + 2 * h + e]);
        }
  }
}

// The tile widths vt builds. Narrower tiles (40 rows: 128 tiles of the 5120-row shapes) measured
// 1.5-2x slower than the stream-K kernel there (scripts/gpu/wgmma_explore.cu): not built.
constexpr int kRowsWidths[] = {136, 128, 112, 64};
// The tile width for an n-row weight matrix on `sms` SMs: of kRowsWidths, the one whose busiest
// CTA has the fewest rows (ties: the wider tile, fewer tiles).
inline int rows_tile_for(int64_t n, int sms) {
  int best = kRowsWidths[0];
  int64_t best_rows = INT64_MAX;
  for (int width : kRowsWidths) {
    const int64_t tiles = (n + width - 1) / width, busiest = ((tiles + sms - 1) / sms) * width;
    if (busiest < best_rows) best = width, best_rows = busiest;
  }
  return best;
}

}  // namespace vt::cuda::wgmma_gemm
