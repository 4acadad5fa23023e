// MoE expert GEMVs grouped by expert (moe_route's layout): a block takes one active expert's
// slice of output rows and applies each loaded weight chunk to every pair routed to that expert,
// so a step reads each routed expert once, not once per (token, expert) pair. Then the weighted
// combine with the sigmoid-gated shared expert. Sums run in a fixed order (bit-identical reruns).
#include <cuda_fp8.h>

#include <algorithm>

#include "ops/moe/moe.h"

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"
#include "ops/gemm/fp8_mma.cuh"
#include "ops/moe/route.cuh"

namespace vt::cuda {
namespace {

constexpr int kGroup = 128;
// FP8: 8 warps; a warp computes 8 output rows (an m16n8k32 MMA's N) of up to 16 pairs (its M) per
// tile, kTiles tiles per pass: one weight load serves 32 pairs, more take another pass (from L2).
constexpr int kFp8Warps = 8;
constexpr int kFp8Tiles = 2;
constexpr int kFp8BlocksPerStep =
    2;  // 128-blocks of K a warp loads at once: 64 bytes per lane in flight
// FP8 on the CUDA cores for few pairs per expert (decode at small batch): kCoreWarps warps a block.
constexpr int kCoreWarps = 4;
constexpr int kCorePairs = 2;  // pairs a pass serves (more take another pass, from L2)
constexpr int kCoreBlocksPerSm = 5;
// Dense (act-dtype weights): a warp per output row, kDensePairs pairs per pass.
constexpr int kDenseWarps = 8;
constexpr int kDensePairs = 8;
constexpr int kCombineThreads = 64;  // x 8 columns each: 512 columns a block

struct GroupedGemvArgs {
  void* y;                        // [pairs, n] act
  const void* x;                  // dense: [rows, k] act; fp8: codes [rows, k]
  const float* x_scales;          // fp8: [rows, ceil(k/128)]
  const int32_t* expert_offsets;  // [E + 1]
  const int32_t* sorted_pairs;    // [pairs]
  const int32_t* active_experts;  // [slots]
  const int32_t* active_count;    // [1]
  const void* weights;            // [E, n, k]: act dtype (dense) or e4m3 codes (fp8)
  const float* w_scales;          // fp8: [E, ceil(n/128), ceil(k/128)]
  int64_t n, k, input_divisor;    // input row of pair p is p / input_divisor
};

// Grid (row blocks, active-expert slot); blocks past the routed experts exit at once. Warp w takes
// output rows c0 .. c0 + 7 (column tile w / kSplits) and every kSplits-th pair of 128-blocks of K
// (split w % kSplits); the splits meet in a fixed-order shared-memory sum. The MMA step is the FP8
// GEMM's (ops/gemm/fp8_mma.cuh) with weight row c0 + g as B's column g and the inputs of pair slots
// g and g + 8 as A's rows.
template <typename T, int kSplits>
__global__ void __launch_bounds__(kFp8Warps * 32, 2)
    sm90_moe_grouped_gemv_fp8(GroupedGemvArgs args) {
  static_assert(kFp8Warps % kSplits == 0, "a block is whole column tiles");
  constexpr int kColumnTiles = kFp8Warps / kSplits, kChunks = 2 * kFp8BlocksPerStep;
  __shared__ float s_partial[kSplits > 1 ? kFp8Warps : 1][32][4 * kFp8Tiles];
  device::pdl_enter();
  const int slot = blockIdx.y;
  if (slot >= *args.active_count) return;  // uniform over the block
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, quad = lane % 4;
  const int split = warp % kSplits;
  const int64_t n = args.n, k = args.k, k_blocks = (k + kGroup - 1) / kGroup,
                n_blocks = (n + kGroup - 1) / kGroup;
  const int64_t c0 = (int64_t(blockIdx.x) * kColumnTiles + warp / kSplits) * 8, column = c0 + group;
  const bool column_ok = column < n;
  const int64_t expert = args.active_experts[slot];
  const int begin = args.expert_offsets[expert], end = args.expert_offsets[expert + 1];
  const uint8_t* weight_row = static_cast<const uint8_t*>(args.weights) + (expert * n + column) * k;
  // c0 is a multiple of 8, so the tile's rows share one 128-row scale block.
  const float* w_scales = args.w_scales + (expert * n_blocks + c0 / kGroup) * k_blocks;
  const uint8_t* x = static_cast<const uint8_t*>(args.x);
  for (int pass = begin; pass < end; pass += 16 * kFp8Tiles) {
    const int count = min(end - pass, 16 * kFp8Tiles);
    // This lane's A rows: the inputs of pair slots group and group + 8 of each tile (-1 past the
    // pass).
    int r_pair[kFp8Tiles][2], r_input[kFp8Tiles][2];
#pragma unroll
    for (int t = 0; t < kFp8Tiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int index = 16 * t + 8 * h + group;
        r_pair[t][h] = index < count ? args.sorted_pairs[pass + index] : 0;
        r_input[t][h] = index < count ? int(r_pair[t][h] / args.input_divisor) : -1;
      }
    float r_acc[kFp8Tiles][4];
#pragma unroll
    for (int t = 0; t < kFp8Tiles; ++t)
      r_acc[t][0] = r_acc[t][1] = r_acc[t][2] = r_acc[t][3] = 0.0f;
    for (int64_t first = int64_t(split) * kFp8BlocksPerStep; first < k_blocks;
         first += kSplits * kFp8BlocksPerStep) {
      // The step's weights and tile 0's inputs in flight together.
      uint4 r_w[kChunks], r_a0[kChunks], r_a1[kChunks];
#pragma unroll
      for (int chunk = 0; chunk < kChunks; ++chunk) {
        const int64_t k0 = first * kGroup + chunk * 64 + quad * 16;
        const bool in_k = k0 < k;
        r_w[chunk] = column_ok && in_k ? __ldcs(reinterpret_cast<const uint4*>(weight_row + k0))
                                       : make_uint4(0, 0, 0, 0);
        r_a0[chunk] = fp8_row_chunk(r_input[0][0] >= 0 ? x + r_input[0][0] * k : nullptr, k0, k);
        r_a1[chunk] = fp8_row_chunk(r_input[0][1] >= 0 ? x + r_input[0][1] * k : nullptr, k0, k);
      }
#pragma unroll
      for (int step = 0; step < kFp8BlocksPerStep; ++step) {
        const int64_t block = first + step;
        if (block >= k_blocks) break;
        const float w_scale = c0 < n ? w_scales[block] : 0.0f;
#pragma unroll
        for (int t = 0; t < kFp8Tiles; ++t) {
          if (16 * t >= count) break;  // uniform over the block
          const float scale0 =
              r_input[t][0] >= 0 ? args.x_scales[r_input[t][0] * k_blocks + block] * w_scale : 0.0f;
          const float scale1 =
              r_input[t][1] >= 0 ? args.x_scales[r_input[t][1] * k_blocks + block] * w_scale : 0.0f;
          fp8_mma_tile_block(r_acc[t], r_w, r_a0, r_a1, t == 0,
                             r_input[t][0] >= 0 ? x + r_input[t][0] * k : nullptr,
                             r_input[t][1] >= 0 ? x + r_input[t][1] * k : nullptr, step, block, k,
                             quad, scale0, scale1);
        }
      }
    }
    if constexpr (kSplits > 1) {
#pragma unroll
      for (int t = 0; t < kFp8Tiles; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) s_partial[warp][lane][4 * t + i] = r_acc[t][i];
      __syncthreads();
      if (split == 0)
#pragma unroll
        for (int t = 0; t < kFp8Tiles; ++t)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            for (int other = 1; other < kSplits; ++other)
              r_acc[t][i] += s_partial[warp + other][lane][4 * t + i];
      __syncthreads();  // the next pass overwrites s_partial
    }
    if (split != 0) continue;
    // C fragment: c0, c1 at pair slot `group`, rows c0 + 2*quad + {0, 1}; c2, c3 at slot group + 8.
    T* y = static_cast<T*>(args.y);
#pragma unroll
    for (int t = 0; t < kFp8Tiles; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int index = 16 * t + group + (i >= 2 ? 8 : 0);
        const int64_t out_column = c0 + 2 * quad + (i % 2);
        if (index < count && out_column < n)
          y[int64_t(r_pair[t][i / 2]) * n + out_column] = device::from_float<T>(r_acc[t][i]);
      }
  }
}

// FP8 with few pairs per expert, on the CUDA cores as the dense M = 1 GEMV (ops/gemm/fp8_gemm.cu):
// a warp owns kCols consecutive output rows (from column0) of one expert over the whole of K. Each
// round a lane loads 16 bytes of each row (a warp load is 512 contiguous bytes of one row), the
// next round's loads issued before this one is used, and each weight piece is applied to up to
// kCorePairs pairs (more take another pass, from L2). The expert's pairs are
// args.sorted_pairs[range[0] .. range[1]), read after the first round's loads are issued;
// wait: the PDL wait comes after those loads (the routing was ready before it).
template <typename T, int kCols>
__device__ __forceinline__ void expert_rows_cores(const GroupedGemvArgs& args, int64_t expert,
                                                  const int32_t* range, int64_t column0,
                                                  bool wait) {
  constexpr int64_t kPiece = 32 * 16;
  const int lane = threadIdx.x % 32;
  const int64_t n = args.n, k = args.k, k_blocks = (k + kGroup - 1) / kGroup,
                n_blocks = (n + kGroup - 1) / kGroup;
  const uint8_t* weights = static_cast<const uint8_t*>(args.weights) + (expert * n + column0) * k;
  // column0 is a multiple of kCols (<= 8), so the warp's rows share one 128-row scale block.
  const float* w_scales = args.w_scales + (expert * n_blocks + column0 / kGroup) * k_blocks;
  uint4 r_next[kCols];
  const auto load_round = [&](int64_t round) {
    const int64_t k0 = round + lane * 16;
#pragma unroll
    for (int c = 0; c < kCols; ++c)
      r_next[c] = k0 < k && column0 + c < n
                      ? __ldcs(reinterpret_cast<const uint4*>(weights + c * k + k0))
                      : make_uint4(0, 0, 0, 0);
  };
  load_round(0);
  if (wait) device::pdl_wait();
  device::pdl_trigger();
  const int begin = range[0], end = range[1];
  const uint8_t* x = static_cast<const uint8_t*>(args.x);
  for (int pass = begin; pass < end; pass += kCorePairs) {
    const int count = min(end - pass, kCorePairs);
    int r_pair[kCorePairs];
    int64_t r_input[kCorePairs];
#pragma unroll
    for (int p = 0; p < kCorePairs; ++p) {
      r_pair[p] = p < count ? args.sorted_pairs[pass + p] : 0;
      r_input[p] = r_pair[p] / args.input_divisor;
    }
    if (pass != begin) load_round(0);
    float r_acc[kCorePairs][kCols];
#pragma unroll
    for (int p = 0; p < kCorePairs; ++p)
#pragma unroll
      for (int c = 0; c < kCols; ++c) r_acc[p][c] = 0.0f;
    for (int64_t round = 0; round < k; round += kPiece) {
      uint4 r_w[kCols];
#pragma unroll
      for (int c = 0; c < kCols; ++c) r_w[c] = r_next[c];
      if (round + kPiece < k) load_round(round + kPiece);
      // k is a multiple of 16: a lane's piece is all in K or all past it.
      const int64_t k0 = round + lane * 16, block = k0 / kGroup;
      const bool in_k = k0 < k;
      const float w_scale = in_k ? w_scales[block] : 0.0f;
      float r_xf[kCorePairs][16], r_scale[kCorePairs];
#pragma unroll
      for (int p = 0; p < kCorePairs; ++p) {
        if (p >= count) break;  // uniform over the warp
        if (in_k)
          device::fp8x16_to_float(*reinterpret_cast<const uint4*>(x + r_input[p] * k + k0),
                                  r_xf[p]);
        r_scale[p] = in_k ? args.x_scales[r_input[p] * k_blocks + block] * w_scale : 0.0f;
      }
      if (!in_k) continue;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        float r_wf[16];
        device::fp8x16_to_float(r_w[c], r_wf);
#pragma unroll
        for (int p = 0; p < kCorePairs; ++p) {
          if (p >= count) break;
          float dot = 0.0f;
#pragma unroll
          for (int e = 0; e < 16; ++e) dot += r_xf[p][e] * r_wf[e];
          r_acc[p][c] += dot * r_scale[p];
        }
      }
    }
    T* y = static_cast<T*>(args.y);
#pragma unroll
    for (int p = 0; p < kCorePairs; ++p) {
      if (p >= count) break;  // uniform over the warp
      float mine = 0.0f;      // lane c keeps row c's total
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const float total = device::warp_sum(r_acc[p][c]);
        mine = lane == c ? total : mine;
      }
      if (lane < kCols && column0 + lane < n)
        y[int64_t(r_pair[p]) * n + column0 + lane] = device::from_float<T>(mine);
    }
  }
}

// Grid (row blocks, active-expert slot), kCoreWarps warps a block, expert_rows_cores per warp. At
// batch 1 the MMA kernel's 16-pair tiles are 1/16th full and its short blocks wait out one or two
// round trips each (1.2-1.5 TB/s). At most 96 registers a thread (kCoreBlocksPerSm): the
// 35B-A3B's one-token gate_up is 576 blocks (64 row blocks x 9 experts), all resident at 5 an SM.
// routing_ready: the routing's writer had completed when the previous kernel passed its wait
// (moe.h), so the slot's expert and the first round of its weights are read before the wait.
template <typename T, int kCols>
__global__ void __launch_bounds__(kCoreWarps * 32, kCoreBlocksPerSm)
    sm90_moe_grouped_gemv_fp8_cores(GroupedGemvArgs args, bool routing_ready) {
  const int slot = blockIdx.y;
  const int64_t column0 = (int64_t(blockIdx.x) * kCoreWarps + threadIdx.x / 32) * kCols;
  if (!routing_ready) device::pdl_wait();
  // Warps without rows or slot leave at once (no block barrier below).
  if (slot >= *args.active_count || column0 >= args.n) return;
  const int64_t expert = args.active_experts[slot];
  expert_rows_cores<T, kCols>(args, expert, args.expert_offsets + expert, column0, routing_ready);
}

// The step's router arguments (moe_route's), for the kernel that routes before its GEMV.
struct RouteArgs {
  MoeRouting routing;   // written by block (0, 0)
  const float* logits;  // [tokens, stride] f32
  int tokens, experts, top_k, stride;
  bool renormalize, shared;
};

// The CUDA-core GEMV of a step whose pairs fit one warp, routing the step itself: each block's
// first warp routes it (warp_route, after the PDL wait for the router's logits) into shared memory,
// block (0, 0) into route.routing for the launches after; then the block's warps take their slot's
// expert as sm90_moe_grouped_gemv_fp8_cores does. The route's own launch goes (5.2 us a MoE layer
// at batch 1, docs/perf/2026-12-07-moe-cuda-cores.md), and the weights wait on the logits alone,
// not on a chain of the route's words: 13.4 us a call against 5.3 + 11.9 in the 35B-A3B's batch-1
// step (docs/perf/2026-12-07-moe-gate-up-splits.md). At 147 registers (before kCoreBlocksPerSm)
// its blocks ran in two waves, each paying the route, and it lost.
template <typename T, int kCols, int kPerLane>
__global__ void __launch_bounds__(kCoreWarps * 32, kCoreBlocksPerSm)
    sm90_moe_routed_gemv_fp8_cores(GroupedGemvArgs args, RouteArgs route) {
  __shared__ int32_t s_ids[32], s_sorted[32], s_active[32], s_slot_pairs[64], s_count;
  __shared__ float s_weights[32];
  const bool writes = blockIdx.x == 0 && blockIdx.y == 0;
  const MoeRouting mine{writes ? route.routing.ids : s_ids,
                        writes ? route.routing.weights : s_weights,
                        writes ? route.routing.expert_offsets : nullptr,
                        writes ? route.routing.sorted_pairs : s_sorted,
                        writes ? route.routing.active_experts : s_active,
                        writes ? route.routing.active_count : &s_count};
  device::pdl_wait();
  if (threadIdx.x < 32)
    warp_route<float, kPerLane>(mine, s_slot_pairs, route.logits, route.tokens, route.experts,
                                route.top_k, route.renormalize, route.shared, route.stride);
  __syncthreads();  // the routing (shared, or global for block (0, 0)) is visible to the block
  const int slot = blockIdx.y;
  const int64_t column0 = (int64_t(blockIdx.x) * kCoreWarps + threadIdx.x / 32) * kCols;
  if (slot >= *mine.active_count || column0 >= args.n) return;
  GroupedGemvArgs own = args;
  own.sorted_pairs = mine.sorted_pairs;
  expert_rows_cores<T, kCols>(own, mine.active_experts[slot], s_slot_pairs + 2 * slot, column0,
                              false);
}

// Dense weights (act dtype): grid (ceil(n / 8), active-expert slot), a warp per output row; each
// weight element loaded is used for up to kDensePairs pairs.
template <typename T>
__global__ void __launch_bounds__(kDenseWarps * 32) sm90_moe_grouped_gemv(GroupedGemvArgs args) {
  device::pdl_enter();
  const int slot = blockIdx.y;
  if (slot >= *args.active_count) return;
  const int lane = threadIdx.x % 32;
  const int64_t n = args.n, k = args.k, row = int64_t(blockIdx.x) * kDenseWarps + threadIdx.x / 32;
  if (row >= n) return;  // whole warps; no block barrier below
  const int64_t expert = args.active_experts[slot];
  const int begin = args.expert_offsets[expert], end = args.expert_offsets[expert + 1];
  const T* w = static_cast<const T*>(args.weights) + (expert * n + row) * k;
  for (int pass = begin; pass < end; pass += kDensePairs) {
    const int count = min(end - pass, kDensePairs);
    int r_pair[kDensePairs];
    int64_t r_input[kDensePairs];  // element offsets of the pairs' input rows
#pragma unroll
    for (int p = 0; p < kDensePairs; ++p) {
      r_pair[p] = p < count ? args.sorted_pairs[pass + p] : 0;
      r_input[p] = (r_pair[p] / args.input_divisor) * k;
    }
    const T* x = static_cast<const T*>(args.x);
    float r_acc[kDensePairs];
#pragma unroll
    for (int p = 0; p < kDensePairs; ++p) r_acc[p] = 0.0f;
    for (int64_t i = lane; i < k; i += 32) {
      const float weight = device::to_float(w[i]);
#pragma unroll
      for (int p = 0; p < kDensePairs; ++p)
        if (p < count) r_acc[p] += weight * device::to_float(x[r_input[p] + i]);
    }
#pragma unroll
    for (int p = 0; p < kDensePairs; ++p) {
      const float sum = device::warp_sum(r_acc[p]);  // every lane: count is uniform over the warp
      if (lane == 0 && p < count)
        static_cast<T*>(args.y)[int64_t(r_pair[p]) * n + row] = device::from_float<T>(sum);
    }
  }
}

// The 8 columns a combine thread sums (`count` of them inside the row; zeros past it).
template <typename T, bool kVector>
__device__ __forceinline__ void load_columns(const T* row, int count, float* r_in) {
  if constexpr (kVector) {
    device::load8(row, r_in);
  } else {
    for (int i = 0; i < 8; ++i) r_in[i] = i < count ? device::to_float(row[i]) : 0.0f;
  }
}

// Grid (ceil(hidden / 512), tokens): each thread 8 consecutive columns of one token (kVector:
// 16-byte loads, hidden a multiple of 8), all k pairs' values loaded before the fixed-order sum
// out = sum_j weight[t, j] * expert_out[t*k + j] (+ sigmoid(shared_gate[t]) * shared[t]).
template <typename T, bool kVector>
__global__ void __launch_bounds__(kCombineThreads)
    sm90_moe_combine(T* __restrict__ g_out, const T* __restrict__ g_expert_out,
                     const float* __restrict__ g_weights, const T* __restrict__ g_shared,
                     const T* __restrict__ g_shared_gate, int64_t hidden, int64_t top_k) {
  device::pdl_enter();
  const int64_t token = blockIdx.y,
                column0 = (int64_t(blockIdx.x) * kCombineThreads + threadIdx.x) * 8;
  if (column0 >= hidden) return;
  const float gate = g_shared ? device::sigmoid(device::to_float(g_shared_gate[token])) : 0.0f;
  float r_value[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const int count = kVector || hidden - column0 >= 8 ? 8 : int(hidden - column0);
  for (int64_t j = 0; j < top_k; ++j) {
    const float weight = g_weights[token * top_k + j];
    float r_in[8];
    load_columns<T, kVector>(g_expert_out + (token * top_k + j) * hidden + column0, count, r_in);
#pragma unroll
    for (int i = 0; i < 8; ++i) r_value[i] += weight * r_in[i];
  }
  if (g_shared) {
    float r_in[8];
    load_columns<T, kVector>(g_shared + token * hidden + column0, count, r_in);
#pragma unroll
    for (int i = 0; i < 8; ++i) r_value[i] += gate * r_in[i];
  }
  T* out = g_out + token * hidden + column0;
  if constexpr (kVector) {
    device::store8(out, r_value);
  } else {
    for (int i = 0; i < count; ++i) out[i] = device::from_float<T>(r_value[i]);
  }
}

// K split over the warps of an FP8 block. Decode steps of 4 to 64 tokens: none. A slot's 8-row
// tiles then take whole K each, with no shared-memory sum, and the ~30+ active experts still fill
// the GPU: the 35B-A3B's gate_up (K = 2048) 27.8 / 50.0 / 84.3 / 175 us at m = 4 / 8 / 16 / 64 in
// `vt bench op moe` against 33.8 / 59.7 / 104.0 at 4 splits, and its decode step 5-7% faster at
// batches 4 to 64 (docs/perf/2026-12-07-moe-gate-up-splits.md). Prefill steps (2,048 tokens)
// were 9% slower without splits. Otherwise the fewest splits (a power of two, at most 8) that
// leave each warp at most 4 128-blocks (two steps), so short K (the down projection) fills whole
// blocks with column tiles and long K (gate_up) still has every warp busy.
int fp8_splits(int64_t k, int64_t tokens) {
  if (tokens >= 4 && tokens <= 64) return 1;
  const int64_t k_blocks = (k + kGroup - 1) / kGroup;
  int splits = 1;
  while (splits < kFp8Warps && k_blocks > 2 * kFp8BlocksPerStep * splits) splits *= 2;
  return splits;
}

template <typename T, int kCols>
void launch_fp8_cores(const char* name, const ::vt::trace::LaunchCost& cost,
                      const GroupedGemvArgs& args, unsigned slots, bool routing_ready,
                      cudaStream_t stream) {
  constexpr int64_t kRows = kCols * kCoreWarps;
  launch(name, cost, sm90_moe_grouped_gemv_fp8_cores<T, kCols>,
         dim3(unsigned((args.n + kRows - 1) / kRows), slots), dim3(kCoreWarps * 32), 0, stream,
         args, routing_ready);
}

// The built-in choice of the CUDA-core kernel's rows a warp (0: the MMA kernel), from what was
// measured in the model: one token, either projection (gate_up first, -37 us a step at batch 1,
// docs/perf/2026-12-07-moe-cuda-cores.md; down, K = 512, 5.77 against 7.60 us a call in the op
// bench, docs/perf/2026-12-08-moe-batch1.md), and gate_up (long K) at two tokens, where the
// MMA kernel's 16-pair tiles are an eighth full (op bench, the shared expert folded: 16.8 against
// 20.7 us). Three tokens and more keep the MMA kernel: not measured in the model without the
// route inside, which lost at three (docs/perf/2026-12-07-moe-gate-up-splits.md).
int core_columns(int64_t tokens, int64_t k) {
  return tokens == 1 || (tokens == 2 && k >= 1024) ? 4 : 0;
}

template <typename T, int kPerLane>
void launch_routed(const ::vt::trace::LaunchCost& cost, const GroupedGemvArgs& args,
                   const RouteArgs& route, unsigned slots, cudaStream_t stream) {
  constexpr int kCols = 4;  // core_columns' choice at one token
  constexpr int64_t kRows = kCols * kCoreWarps;
  launch("sm90_moe_routed_gemv_fp8_cores", cost, sm90_moe_routed_gemv_fp8_cores<T, kCols, kPerLane>,
         dim3(unsigned((args.n + kRows - 1) / kRows), slots), dim3(kCoreWarps * 32), 0, stream,
         args, route);
}

template <typename T, int kSplits>
void launch_fp8(const char* name, const ::vt::trace::LaunchCost& cost, const GroupedGemvArgs& args,
                unsigned slots, cudaStream_t stream) {
  constexpr int64_t kColumns = 8 * (kFp8Warps / kSplits);
  launch(name, cost, sm90_moe_grouped_gemv_fp8<T, kSplits>,
         dim3(unsigned((args.n + kColumns - 1) / kColumns), slots), dim3(kFp8Warps * 32), 0, stream,
         args);
}

}  // namespace

void moe_expert_gemv(void* y, const void* x, const float* x_scales, const MoeRouting& routing,
                     const void* weights, const float* w_scales, int64_t tokens, int64_t experts,
                     int64_t top_k, int64_t n, int64_t k, int64_t input_divisor, bool fp8,
                     DType act, cudaStream_t stream, double experts_read, MoeGemvSchedule schedule,
                     bool routing_ready, const MoeRouter* router) {
  // The router inside the GEMV at one token, where the built-in choice is the CUDA-core kernel at
  // 4 rows and a token's pairs (at most kMaxTopK + 1) fit the warp route (at two and three tokens
  // it lost: its grid's two waves each paid the route); otherwise moe_route first.
  const bool routes_here =
      router && fp8 && schedule.splits == 0 && schedule.columns == 0 && tokens == 1;
  static_assert(kMaxTopK + 1 <= 32, "one token's pairs fit the warp route");
  if (router) {
    VT_CHECK(experts == router->experts + router->shared_expert &&
                 top_k == router->top_k + router->shared_expert,
             "moe_expert_gemv: the router's ", router->experts, " experts, top ", router->top_k,
             router->shared_expert ? " and the shared one" : "", " against ", experts, ", top ",
             top_k);
    if (!routes_here)
      moe_route(routing, router->logits, tokens, router->experts, router->top_k,
                router->renormalize, DType::kF32, stream, router->shared_expert,
                router->logits_stride);
  }
  VT_CHECK(!fp8 || k % 16 == 0, "moe_expert_gemv: FP8 K = ", k, " must be a multiple of 16");
  VT_CHECK(schedule.columns == 0 || schedule.columns == 2 || schedule.columns == 4 ||
               schedule.columns == 8,
           "moe_expert_gemv: CUDA-core rows a warp ", schedule.columns,
           " (0: the MMA kernel, or 2, 4, 8)");
  VT_CHECK(schedule.columns == 0 || schedule.splits == 0,
           "moe_expert_gemv: K splits are the MMA kernel's");
  VT_CHECK(schedule.splits == 0 || schedule.splits == 1 || schedule.splits == 2 ||
               schedule.splits == 4 || schedule.splits == 8,
           "moe_expert_gemv: K splits ", schedule.splits, " (0: built-in, or 1, 2, 4, 8)");
  VT_CHECK(input_divisor >= 1, "moe_expert_gemv: input_divisor");
  const int64_t pairs = tokens * top_k;
  if (pairs == 0) return;
  const int64_t slots = std::min(pairs, experts);
  VT_CHECK(slots <= 65535, "moe_expert_gemv: ", slots, " expert slots");
  const GroupedGemvArgs args{y,
                             x,
                             x_scales,
                             routing.expert_offsets,
                             routing.sorted_pairs,
                             routing.active_experts,
                             routing.active_count,
                             weights,
                             w_scales,
                             n,
                             k,
                             input_divisor};
  // Each routed expert's weights (and block scales) once, each pair's input row, each output.
  const double element = double(dtype_size(act));
  const double expert_bytes =
      fp8 ? double(n) * double(k) + double((n + 127) / 128) * double((k + 127) / 128) * 4
          : double(n) * double(k) * element;
  const double input_row = fp8 ? double(k) + double((k + 127) / 128) * 4 : double(k) * element;
  const double rows_in = double((pairs + input_divisor - 1) / input_divisor);
  const ::vt::trace::LaunchCost cost{
      fp8 ? "fp8_expert_gemv" : "expert_gemv",
      {pairs, n, k, 0},
      (experts_read > 0 ? experts_read : double(slots)) * expert_bytes + rows_in * input_row +
          double(pairs) * double(n) * element + double(pairs) * 8,
      2.0 * double(pairs) * double(n) * double(k),
      ::vt::trace::OpGroup::kMoe};
  if (!fp8) {
    VT_DISPATCH_ACT(act, T,
                    launch("sm90_moe_grouped_gemv", cost, sm90_moe_grouped_gemv<T>,
                           dim3(unsigned((n + kDenseWarps - 1) / kDenseWarps), unsigned(slots)),
                           dim3(kDenseWarps * 32), 0, stream, args));
    return;
  }
  if (routes_here) {
    const int64_t stride = checked_route_stride(tokens, router->experts, router->top_k,
                                                router->shared_expert, router->logits_stride);
    const RouteArgs route{routing,
                          static_cast<const float*>(router->logits),
                          int(tokens),
                          int(router->experts),
                          int(router->top_k),
                          int(stride),
                          router->renormalize,
                          router->shared_expert};
    // The route's logits, ids, weights and layout words on top of the GEMV's bytes.
    ::vt::trace::LaunchCost routed = cost;
    routed.bytes += double(tokens) * double(stride) * 4 + double(pairs) * 16 +
                    double(experts + 1) * 4 + double(slots + 1) * 4;
    VT_DISPATCH_ACT(act, T, {
      with_experts_per_lane(router->experts, [&](auto per_lane) {
        launch_routed<T, decltype(per_lane)::value>(routed, args, route, unsigned(slots), stream);
      });
    });
    return;
  }
  // The CUDA-core kernel where the built-in choice or a schedule asks for it.
  const int columns = schedule.columns       ? schedule.columns
                      : schedule.splits == 0 ? core_columns(tokens, k)
                                             : 0;
  if (columns) {
    const char* name = "sm90_moe_grouped_gemv_fp8_cores";
    VT_DISPATCH_ACT(act, T, {
      switch (columns) {
        case 2:
          launch_fp8_cores<T, 2>(name, cost, args, unsigned(slots), routing_ready, stream);
          break;
        case 4:
          launch_fp8_cores<T, 4>(name, cost, args, unsigned(slots), routing_ready, stream);
          break;
        default:
          launch_fp8_cores<T, 8>(name, cost, args, unsigned(slots), routing_ready, stream);
          break;
      }
    });
    return;
  }
  const char* name = "sm90_moe_grouped_gemv_fp8";
  VT_DISPATCH_ACT(act, T, {
    switch (schedule.splits ? schedule.splits : fp8_splits(k, tokens)) {
      case 1:
        launch_fp8<T, 1>(name, cost, args, unsigned(slots), stream);
        break;
      case 2:
        launch_fp8<T, 2>(name, cost, args, unsigned(slots), stream);
        break;
      case 4:
        launch_fp8<T, 4>(name, cost, args, unsigned(slots), stream);
        break;
      default:
        launch_fp8<T, 8>(name, cost, args, unsigned(slots), stream);
        break;
    }
  });
}

void moe_combine(void* out, const void* expert_out, const float* weights, const void* shared,
                 const void* shared_gate, int64_t tokens, int64_t hidden, int64_t top_k, DType act,
                 cudaStream_t stream) {
  if (tokens == 0) return;
  VT_CHECK(tokens <= 65535, "moe_combine: ", tokens, " tokens");
  // Every pair's expert output and weight, the shared expert's output and gate, the output.
  const double element = double(dtype_size(act));
  const ::vt::trace::LaunchCost cost{
      "cuda",
      {tokens, hidden, top_k, 0},
      double(tokens) *
          (double(top_k) * (double(hidden) * element + 4) +
           (shared ? double(hidden) * element + element : 0) + double(hidden) * element),
      0,
      ::vt::trace::OpGroup::kMoe};
  const dim3 grid(unsigned((hidden + 8 * kCombineThreads - 1) / (8 * kCombineThreads)),
                  unsigned(tokens));
  const bool vector = hidden % 8 == 0;
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_moe_combine", cost,
                         vector ? sm90_moe_combine<T, true> : sm90_moe_combine<T, false>, grid,
                         dim3(kCombineThreads), 0, stream, static_cast<T*>(out),
                         static_cast<const T*>(expert_out), weights, static_cast<const T*>(shared),
                         static_cast<const T*>(shared_gate), hidden, top_k));
}

}  // namespace vt::cuda
