// Small-M FP8 block-scaled GEMM on Hopper's own paths: the bulk tensor copy engine (TMA) streams
// 128 x 128 weight blocks through a ring of shared-memory stages and wgmma multiplies them with
// the activation rows, weights as the A operand ("swap AB": 64 weight rows per instruction, the
// M <= 64 tokens as the instruction's N, so nothing is padded to 64 tokens).
//
// The work is split over a persistent grid (at most one CTA per SM, all resident): the weight
// matrix is tiles x k_blocks units (a tile is 64 or 128 output columns; a unit is one tile's
// 128-byte slice of K, 16 KB at 128 rows), walked in one of two ways (walk_of):
//  - stream-K: the U units in order, CTA c of C taking [c U / C, (c + 1) U / C), so every CTA
//    streams the same bytes whatever the shape. A tile shared by several CTAs is summed by its
//    first owner, whose share ends its range: it adds the later owners' fp32 partials.
//  - receivers (fewer tiles than CTAs): CTA t streams tile t's last R blocks and sums the tile; the
//    other CTAs split the tiles' first blocks evenly, R a couple of units more than their share,
//    so their partials are written before the receiver finishes its own (no wait at the end).
// A tile wholly inside one CTA is written directly. Partials are added in CTA order (the result
// is bit-identical run to run). Partials are fp32 words that mark themselves: an unwritten word
// holds kUnwritten (a NaN no writer stores: a partial with those bits is written as the canonical
// NaN), so the reader needs no fence, counter or flag: it reloads until no word is kUnwritten
// (several owners' words per request, 16 bytes per load), then sets them back for the next call
// (which cannot start before this grid ends: its consumers wait on PDL). A summer waits on CTAs
// that never wait on it, so this ends. (64-bit words with a flag in the upper half, as before,
// cost twice the bytes: the shared-tile sum was ~2x dearer at 16 tokens than at 8.)
//
// Per unit the consumer warpgroup runs wgmma m64nNk32 (each 64-row half x four k32 steps)
// into a block accumulator, then adds block x w_scale x a_scale[token] into the fp32 total
// (the block scales of the 1 x 128 / 128 x 128 format, applied per 128-K block as the CPU
// reference does). One producer warp issues the copies: the blocks by the copy engine (lane 0),
// the unit's scales by every lane (cp.async into the stage, completing on the same barrier, so a
// consumer never waits on a global load); weights, being constant, are requested for the first
// stages before the programmatic-launch wait, activations and scales after it. Units are walked
// with (tile, block) cursors: a 64-bit division per unit in the producer warp limited the stream.
//
// Device code and the host launch of one configuration; the tensor maps (cuTensorMapEncodeTiled)
// are the caller's: weights [n, k] and activations [m, k] e4m3, both with 128 x 128-byte boxes
// (activations: kTokens rows) and the 128-byte swizzle.
#pragma once

#include <cuda.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cudaTypedefs.h>

#include <cstdint>

#include "cuda/cluster.cuh"
#include "cuda/common.cuh"
#include "cuda/mbarrier.cuh"
#include "ops/gemm/fp8_gemm_split.h"

namespace vt::cuda::wgmma_gemm {

constexpr int kBlockK = 128;  // K bytes per unit: one scale block, the 128-byte swizzle span
constexpr int kConsumerThreads = 128;            // one warpgroup, warps 0..3
constexpr int kThreads = kConsumerThreads + 32;  // + the producer warp

// A tile is kHalves x 64 weight rows; a stage holds its 128 x 128-byte block and the tokens' block.
template <int kTokens, int kHalves>
__host__ __device__ constexpr uint32_t stage_bytes() {
  return uint32_t(kHalves) * 64 * kBlockK + uint32_t(kTokens) * kBlockK;
}
// Dynamic shared memory: the stages (1024-byte aligned for the swizzle), the barriers, alignment slack.
// Per stage, beside the blocks: the unit's activation scales (one per token) and its weight scale,
// copied in by the producer warp with the blocks (so no consumer waits on a global load per unit).
template <int kTokens>
__host__ __device__ constexpr int scale_slots() {
  return kTokens + 4;  // tokens, then the weight scale; 16-byte multiple
}
// Dynamic shared memory: the stages (1024-byte aligned for the swizzle), the barriers, the scales,
// alignment slack.
template <int kTokens, int kStages, int kHalves>
constexpr size_t shared_bytes() {
  return size_t(kStages) * stage_bytes<kTokens, kHalves>() + 2 * kStages * sizeof(uint64_t) +
         size_t(kStages) * scale_slots<kTokens>() * sizeof(float) + 16 + 1024;
}
// The cluster split's first CTA also holds the other CTAs' partials: per CTA, kHalves x kTokens / 2
// floats per consumer thread.
template <int kTokens, int kHalves>
constexpr size_t cluster_partial_bytes() {
  return size_t(kHalves) * (kTokens / 2) * 128 * sizeof(float);
}
// The shared-tile sum reads up to partial_batch partners' partials per request (one round trip for
// all); the persistent split's summer requests its first batch into shared memory before its range
// ends (prefetch_bytes, beside the stages: gemm_body's prefetch_lead).
template <int kTokens, int kHalves>
__host__ __device__ constexpr int partial_batch() {
  return kHalves * kTokens / 2 >= 64 ? 1 : 64 / (kHalves * kTokens / 2);
}
template <int kTokens, int kHalves>
constexpr size_t prefetch_bytes() {
  return size_t(partial_batch<kTokens, kHalves>()) * kHalves * (kTokens / 2) * 128 * sizeof(float);
}

using device::barrier_arrive;
using device::barrier_expect_bytes;
using device::barrier_init;
using device::barrier_wait;
using device::cluster_address;
using device::cluster_arrive;
using device::cluster_arrive_relaxed;
using device::cluster_rank;
using device::cluster_size;
using device::cluster_wait;
using device::copy_async_16;
using device::cp_async_commit;
using device::cp_async_wait_all;
using device::smem_address;
using device::store_cluster;

// A 2-D box of `map` at (x = K offset, y = row offset) into shared memory, completing on `barrier`.
__device__ __forceinline__ void tma_load_2d(void* destination, const CUtensorMap* map, int32_t x, int32_t y,
                                            uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_address(destination)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_address(barrier))
      : "memory");
}

// 4 bytes from global to shared memory, asynchronously (zeros where !valid); a thread's copies
// are tracked by copy_async_arrive.
__device__ __forceinline__ void copy_async_4(float* destination, const float* source, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_address(destination)), "l"(source),
               "r"(valid ? 4 : 0)
               : "memory");
}
// An arrival on `barrier` (counted in its expected arrivals) once this thread's copies above land.
__device__ __forceinline__ void copy_async_arrive(uint64_t* barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_address(barrier)) : "memory");
}
// A shared tile's partials: fp32 words, each saying by itself whether it holds this call's value
// (kUnwritten, fp8_gemm_split.h: not yet; the workspace starts filled with it, the reader puts it
// back). Four words per access; each 4-byte element is single-copy atomic, which is all the reader
// relies on.
__device__ __forceinline__ void store_relaxed4(uint32_t* address, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.relaxed.gpu.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(address), "r"(a), "r"(b), "r"(c), "r"(d)
               : "memory");
}
__device__ __forceinline__ uint4 load_relaxed4(const uint32_t* address) {
  uint4 v;
  asm volatile("ld.relaxed.gpu.global.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(address)
               : "memory");
  return v;
}

// wgmma shared-memory descriptor of a K-major operand in the 128-byte swizzle: rows of 128 bytes,
// 8-row atoms 1024 bytes apart (stride byte offset); the leading offset is unused in this mode.
__device__ __forceinline__ uint64_t smem_descriptor(const void* pointer) {
  const uint64_t address = smem_address(pointer);
  return ((address & 0x3FFFF) >> 4) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

template <int kTokens>
__device__ __forceinline__ void wgmma_e4m3(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate);

template <>
__device__ __forceinline__ void wgmma_e4m3<8>(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, %4, %5, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_e4m3<16>(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_e4m3<32>(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_e4m3<64>(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
      "%28,%29,%30,%31}, %32, %33, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// Keeps the compiler from reading accumulators before wgmma.wait_group has made them final.
template <int kCount>
__device__ __forceinline__ void fence_registers(float* d) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// What a launch does: the whole GEMM into y (kFull), or every tile share written as an fp32
// partial for the consumer to sum (kPartialsOut: sm90_fp8_gemm_wgmma_partials; fp8_gemm_split.h's
// partial_slot).
enum Mode { kFull = 0, kPartialsOut = 1 };

// The accumulator fragment of m64nN (per thread, N / 2 floats): register 4c + 2h + e holds row
// 16 warp + lane / 4 + 8 h of the 64, column (token) 8c + 2 (lane % 4) + e.
//
// receive_units: 0 for the stream-K split, else R of the receivers split (fp8_gemm_split.h).
// prefetch_lead: a stream-K summer of its range's last tile requests its first partners' words
// into shared memory (cp.async: nothing waits on them) after multiplying unit end - 1 - lead, so
// that the read's round trip (~1 us under the stream's load) overlaps its
// last units; words that come unwritten are re-read from global memory as before (the copy's
// reads are weak, but a word can only hold kUnwritten, set back before this grid's consumers pass
// the programmatic-launch wait, or this call's value). 0: no prefetch.
// kClustered: the cluster split instead (launched in clusters of c CTAs, one per tile; partials
// through distributed shared memory, no g_partials).
// kPartialsOut (stream-K, receive_units 0): g_partials is the output, max_owners slots of
// [m][kTileRows] fp32 words per tile (fp8_gemm_split.h's partial_slot); g_y is not written.
template <typename T, int kTokens, int kStages, int kHalves, int kMode, bool kClustered>
__device__ __forceinline__ void gemm_body(const CUtensorMap& weight_map, const CUtensorMap& activation_map,
                                          T* __restrict__ g_y, int64_t ldy, const float* __restrict__ g_a_scales,
                                          const float* __restrict__ g_w_scales, uint32_t* __restrict__ g_partials,
                                          int m, int n, int k, int receive_units, int prefetch_lead,
                                          int max_owners = 0) {
  static_assert(kTokens == 8 || kTokens == 16 || kTokens == 32 || kTokens == 64, "wgmma N of 8..64 tokens");
  static_assert(kHalves == 1 || kHalves == 2, "tiles of 64 or 128 weight rows");
  constexpr int kTileRows = 64 * kHalves;
  constexpr int kRegs = kTokens / 2;  // per 64-row half
  constexpr int kSlots = scale_slots<kTokens>();
  constexpr uint32_t kStageBytes = stage_bytes<kTokens, kHalves>(), kWeightBytes = kTileRows * kBlockK;
  extern __shared__ uint8_t s_raw[];
  uint8_t* s_stages = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(s_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* s_full = reinterpret_cast<uint64_t*>(s_stages + size_t(kStages) * kStageBytes);
  uint64_t* s_empty = s_full + kStages;
  float* s_scales = reinterpret_cast<float*>(s_empty + kStages);  // [kStages][kSlots]
  float* s_cluster = s_scales + kStages * kSlots;  // kClustered: [rank - 1][kWords / 4][thread][4]
  // Else the prefetched partials: [partner][kWords / 4][thread][4] words.
  uint32_t* s_prefetch = reinterpret_cast<uint32_t*>(s_cluster);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t k_blocks = (k + kBlockK - 1) / kBlockK, tiles = (n + kTileRows - 1) / kTileRows;
  const int64_t ctas = gridDim.x, cta = blockIdx.x;
  const Walk walk =
      kClustered ? cluster_walk(cta, cluster_size(), k_blocks) : walk_of(cta, ctas, tiles, k_blocks, receive_units);
  const int64_t begin = walk.begin, end = walk.end;
  constexpr bool kDeferred = (kMode & kPartialsOut) != 0;
  static_assert(!kDeferred || !kClustered, "the deferred sum is the stream-K split's");

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(&s_full[s], 1 + 32);  // the copy engine's bytes + every producer lane's scale copies
      barrier_init(&s_empty[s], kConsumerThreads / 32);
    }
    device::barrier_init_fence();
  }
  __syncthreads();
  // Cluster phase 0 (every CTA of the cluster has started, so its shared memory may be written):
  // arrived here, waited on before the first store into another CTA.
  if constexpr (kClustered) cluster_arrive_relaxed();

  if (warp == kConsumerThreads / 32) {  // the producer warp: lane 0 the blocks, every lane scales
    const auto weights = [&](const Cursor& at, int s) {
      barrier_expect_bytes(&s_full[s], kStageBytes);
      tma_load_2d(s_stages + size_t(s) * kStageBytes, &weight_map, at.block * kBlockK, at.tile * kTileRows, &s_full[s]);
    };
    // The unit's activations (lane 0) and scales (tokens over the lanes, the weight scale on lane
    // 0; tokens >= m read as zero), then each lane's arrival once its copies land.
    const auto activations = [&](const Cursor& at, int s) {
      const int kb = at.block;
      if (lane == 0) tma_load_2d(s_stages + size_t(s) * kStageBytes + kWeightBytes, &activation_map, kb * kBlockK, 0,
                                 &s_full[s]);
      float* slots = s_scales + s * kSlots;
#pragma unroll
      for (int t = lane; t < kTokens; t += 32)
        copy_async_4(&slots[t], g_a_scales + (t < m ? int64_t(t) * k_blocks + kb : kb), t < m);
      if (lane == 0)
        copy_async_4(&slots[kTokens], g_w_scales + int64_t(at.tile * kTileRows / 128) * k_blocks + kb, true);
      copy_async_arrive(&s_full[s]);
    };
    const int64_t ahead = begin + kStages < end ? begin + kStages : end;
    Cursor next_weights(walk, begin), next_activations(walk, begin);
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&weight_map)) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&activation_map)) : "memory");
      // Weights are constant: the first stages' blocks stream while the previous kernel drains.
      for (int64_t u = begin; u < ahead; ++u, next_weights.advance()) weights(next_weights, int((u - begin) % kStages));
    } else {
      for (int64_t u = begin; u < ahead; ++u) next_weights.advance();
    }
    device::pdl_enter();
    for (int64_t u = begin; u < ahead; ++u, next_activations.advance())
      activations(next_activations, int((u - begin) % kStages));
    for (int64_t u = ahead; u < end; ++u, next_weights.advance()) {
      const int64_t i = u - begin;
      const int s = int(i % kStages);
      barrier_wait(&s_empty[s], uint32_t((i / kStages - 1) & 1));
      if (lane == 0) weights(next_weights, s);
      activations(next_weights, s);
    }
    if constexpr (kClustered) {  // every thread takes part in both cluster phases
      cluster_wait();
      cluster_arrive();
    }
    return;
  }

  // The consumer warpgroup.
  device::pdl_wait();
  constexpr int kWords = kHalves * kRegs;
  static_assert(kWords % 4 == 0, "16-byte pieces of the partials");
  constexpr int kBatch = partial_batch<kTokens, kHalves>();
  // Who shares the range's last tile, worked out now (its 64-bit divisions off the range's end,
  // where they would delay the partial or the sum), and whether (after which unit) this CTA, a
  // stream-K summer, prefetches that tile's partials (the receivers' come at the end regardless).
  int64_t prefetch_at = -1;
  TileShares last_shares{-1, 0, 1, 0, false};
  if constexpr (!kClustered && !kDeferred) {
    if (end > begin) {
      last_shares = tile_shares(Cursor(walk, end - 1).tile, tiles, k_blocks, ctas, receive_units, walk);
      if (prefetch_lead > 0 && receive_units == 0 && !last_shares.alone() && last_shares.sums(cta))
        prefetch_at = end - 1 - prefetch_lead > begin ? end - 1 - prefetch_lead : begin;
    }
  }
  const int quad = lane % 4;
  float r_total[kHalves][kRegs], r_block[kHalves][kRegs];
#pragma unroll
  for (int h = 0; h < kHalves; ++h)
#pragma unroll
    for (int r = 0; r < kRegs; ++r) r_total[h][r] = 0.0f;
  Cursor at(walk, begin);
  for (int64_t u = begin; u < end; ++u, at.advance()) {
    const int64_t i = u - begin, tile = at.tile;
    const int s = int(i % kStages);
    barrier_wait(&s_full[s], uint32_t((i / kStages) & 1));
    const uint8_t* stage = s_stages + size_t(s) * kStageBytes;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int h = 0; h < kHalves; ++h)
#pragma unroll
      for (int step = 0; step < kBlockK / 32; ++step)
        wgmma_e4m3<kTokens>(r_block[h], smem_descriptor(stage + h * 64 * kBlockK + step * 32),
                            smem_descriptor(stage + kWeightBytes + step * 32), step);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
    for (int h = 0; h < kHalves; ++h) fence_registers<kRegs>(r_block[h]);
    // The unit's scales (read before the stage is handed back): w_scale x a_scale per token.
    const float* slots = s_scales + s * kSlots;
    const float w_scale = slots[kTokens];
    float r_scale[kTokens / 4];
#pragma unroll
    for (int c = 0; c < kTokens / 8; ++c)
#pragma unroll
      for (int e = 0; e < 2; ++e) r_scale[2 * c + e] = w_scale * slots[8 * c + 2 * quad + e];
    __syncwarp();
    if (lane == 0) barrier_arrive(&s_empty[s]);
#pragma unroll
    for (int h = 0; h < kHalves; ++h)
#pragma unroll
      for (int r = 0; r < kRegs; ++r) r_total[h][r] += r_block[h][r] * r_scale[(r / 4) * 2 + (r % 2)];
    if (u == prefetch_at) {
      const int64_t first = last_shares.summed_from();
      const int count = int(last_shares.last - first + 1 < kBatch ? last_shares.last - first + 1 : kBatch);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (b >= count) break;
        const uint32_t* theirs = g_partials + last_shares.slot(first + b) * (kWords * kConsumerThreads);
#pragma unroll
        for (int q = 0; q < kWords / 4; ++q)
          copy_async_16(s_prefetch + ((b * (kWords / 4) + q) * kConsumerThreads + threadIdx.x) * 4,
                        theirs + (q * kConsumerThreads + threadIdx.x) * 4);
      }
      cp_async_commit();
    }
    if (!at.last_of_tile() && u + 1 != end) continue;

    const auto store = [&](float (*values)[kRegs]) {
#pragma unroll
      for (int h = 0; h < kHalves; ++h)
#pragma unroll
        for (int r = 0; r < kRegs; ++r) {
          const int64_t column = tile * kTileRows + h * 64 + 16 * warp + lane / 4 + 8 * ((r / 2) % 2);
          const int token = 8 * (r / 4) + 2 * quad + (r % 2);
          if (column < n && token < m) g_y[token * ldy + column] = device::from_float<T>(values[h][r]);
        }
    };
    if constexpr (kDeferred) {
      // Every share is a partial for the consumer: [token][column in tile] words, tokens < m.
      const int64_t first_owner = unit_owner(tile * k_blocks, tiles * k_blocks, ctas);
      float* mine = reinterpret_cast<float*>(g_partials) +
                    partial_slot(tile, cta, first_owner, max_owners) * int64_t(m) * kTileRows;
#pragma unroll
      for (int h = 0; h < kHalves; ++h)
#pragma unroll
        for (int r = 0; r < kRegs; ++r) {
          const int column = h * 64 + 16 * warp + lane / 4 + 8 * ((r / 2) % 2);
          const int token = 8 * (r / 4) + 2 * quad + (r % 2);
          if (token < m) mine[token * kTileRows + column] = r_total[h][r];
          r_total[h][r] = 0.0f;
        }
      continue;
    }
    if constexpr (kClustered) {
      // The cluster's CTAs stream one tile each: ranks > 0 store their partials into rank 0's
      // shared memory, rank 0 adds them in rank order (deterministic) and writes the tile.
      const uint32_t rank = cluster_rank(), size = cluster_size();
      cluster_wait();  // phase 0
      if (rank != 0) {
        const uint32_t base = cluster_address(s_cluster, 0) + (rank - 1) * uint32_t(kWords * kConsumerThreads * 4);
        const float* words = &r_total[0][0];
#pragma unroll
        for (int q = 0; q < kWords / 4; ++q)
          store_cluster(base + uint32_t((q * kConsumerThreads + threadIdx.x) * 16), words[4 * q], words[4 * q + 1],
                        words[4 * q + 2], words[4 * q + 3]);
      }
      cluster_arrive();  // phase 1: the partials are in rank 0's shared memory
      if (rank != 0) return;
      cluster_wait();
      float* words = &r_total[0][0];
      for (uint32_t from = 1; from < size; ++from) {
        const float4* theirs = reinterpret_cast<const float4*>(s_cluster) + (from - 1) * (kWords / 4) * kConsumerThreads;
#pragma unroll
        for (int q = 0; q < kWords / 4; ++q) {
          const float4 v = theirs[q * kConsumerThreads + threadIdx.x];
          words[4 * q] += v.x, words[4 * q + 1] += v.y, words[4 * q + 2] += v.z, words[4 * q + 3] += v.w;
        }
      }
      store(r_total);
      return;
    }
    // The CTA's share of this tile is done: who else holds a share, and where their partials go
    // (fp8_gemm_split.h).
    const TileShares shares =
        tile == last_shares.tile ? last_shares : tile_shares(tile, tiles, k_blocks, ctas, receive_units, walk);
    if (shares.alone()) {
      store(r_total);
    } else if (!shares.sums(cta)) {
      // Hand the partial to the tile's summer (stream-K: the first owner, which finishes its share
      // at the end of its range; receivers: the tile's receiver). Thread t's words 4q..4q+3 at
      // (q x 128 + t) x 4: every store is 16 bytes per thread, 512 per warp.
      uint32_t* mine = g_partials + shares.slot(shares.owner_of(cta)) * (kWords * kConsumerThreads);
      const float* words = &r_total[0][0];
#pragma unroll
      for (int q = 0; q < kWords / 4; ++q) {
        const auto bits = [&](int e) { return partial_bits(__float_as_uint(words[4 * q + e])); };
        store_relaxed4(mine + (q * kConsumerThreads + threadIdx.x) * 4, bits(0), bits(1), bits(2), bits(3));
      }
    } else {
      // The summer: its own share, then the other owners' in CTA order (deterministic).
      // Up to kBatch owners' partials are requested at once (one round trip for all, not one
      // each; the first batch prefetched into shared memory where prefetch_at says), re-read
      // until no word is kUnwritten, and set back to it for the next call.
      float* words = &r_total[0][0];
#pragma unroll 1
      for (int64_t first = shares.summed_from(); first <= shares.last; first += kBatch) {
        const int count = int(shares.last - first + 1 < kBatch ? shares.last - first + 1 : kBatch);
        uint4 r_words[kBatch][kWords / 4];
        const auto all_written = [&] {
          bool written = true;
#pragma unroll
          for (int b = 0; b < kBatch; ++b) {
            if (b >= count) break;
#pragma unroll
            for (int q = 0; q < kWords / 4; ++q)
              written = written && r_words[b][q].x != kUnwritten && r_words[b][q].y != kUnwritten &&
                        r_words[b][q].z != kUnwritten && r_words[b][q].w != kUnwritten;
          }
          return written;
        };
        bool ready = false;
        if (prefetch_at >= 0 && tile == last_shares.tile && first == shares.summed_from()) {
          cp_async_wait_all();  // this thread's own copies: no barrier needed to read them
#pragma unroll
          for (int b = 0; b < kBatch; ++b) {
            if (b >= count) break;
#pragma unroll
            for (int q = 0; q < kWords / 4; ++q)
              r_words[b][q] = *reinterpret_cast<const uint4*>(
                  s_prefetch + ((b * (kWords / 4) + q) * kConsumerThreads + threadIdx.x) * 4);
          }
          ready = all_written();
        }
        while (!ready) {
#pragma unroll
          for (int b = 0; b < kBatch; ++b) {
            if (b >= count) break;
            const uint32_t* theirs = g_partials + shares.slot(first + b) * (kWords * kConsumerThreads);
#pragma unroll
            for (int q = 0; q < kWords / 4; ++q)
              r_words[b][q] = load_relaxed4(theirs + (q * kConsumerThreads + threadIdx.x) * 4);
          }
          ready = all_written();
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          if (b >= count) break;
          uint32_t* theirs = g_partials + shares.slot(first + b) * (kWords * kConsumerThreads);
#pragma unroll
          for (int q = 0; q < kWords / 4; ++q) {
            words[4 * q] += __uint_as_float(r_words[b][q].x), words[4 * q + 1] += __uint_as_float(r_words[b][q].y);
            words[4 * q + 2] += __uint_as_float(r_words[b][q].z), words[4 * q + 3] += __uint_as_float(r_words[b][q].w);
            store_relaxed4(theirs + (q * kConsumerThreads + threadIdx.x) * 4, kUnwritten, kUnwritten, kUnwritten,
                             kUnwritten);
          }
        }
      }
      store(r_total);
    }
#pragma unroll
    for (int h = 0; h < kHalves; ++h)
#pragma unroll
      for (int r = 0; r < kRegs; ++r) r_total[h][r] = 0.0f;
  }
}

template <typename T, int kTokens, int kStages, int kHalves, int kMode = kFull>
__global__ void __launch_bounds__(kThreads, 1) sm90_fp8_gemm_wgmma(
    const __grid_constant__ CUtensorMap weight_map, const __grid_constant__ CUtensorMap activation_map,
    T* __restrict__ g_y, int64_t ldy, const float* __restrict__ g_a_scales, const float* __restrict__ g_w_scales,
    uint32_t* __restrict__ g_partials, int m, int n, int k, int receive_units, int prefetch_lead) {
  gemm_body<T, kTokens, kStages, kHalves, kMode, false>(weight_map, activation_map, g_y, ldy, g_a_scales, g_w_scales,
                                                        g_partials, m, n, k, receive_units, prefetch_lead);
}

// The stream-K split with the sum left to the consumer (kPartialsOut): partials out, no y.
template <int kTokens, int kStages, int kHalves>
__global__ void __launch_bounds__(kThreads, 1) sm90_fp8_gemm_wgmma_partials(
    const __grid_constant__ CUtensorMap weight_map, const __grid_constant__ CUtensorMap activation_map,
    const float* __restrict__ g_a_scales, const float* __restrict__ g_w_scales, float* __restrict__ g_out, int m,
    int n, int k, int max_owners) {
  gemm_body<__nv_bfloat16, kTokens, kStages, kHalves, kPartialsOut, false>(
      weight_map, activation_map, nullptr, 0, g_a_scales, g_w_scales, reinterpret_cast<uint32_t*>(g_out), m, n, k, 0, 0,
      max_owners);
}

// The cluster split (fp8_gemm_split.h's cluster_walk): launched in clusters of 2..8 CTAs, one
// cluster per tile; dynamic shared memory adds (c - 1) x cluster_partial_bytes.
template <typename T, int kTokens, int kStages, int kHalves>
__global__ void __launch_bounds__(kThreads, 1) sm90_fp8_gemm_wgmma_cluster(
    const __grid_constant__ CUtensorMap weight_map, const __grid_constant__ CUtensorMap activation_map,
    T* __restrict__ g_y, int64_t ldy, const float* __restrict__ g_a_scales, const float* __restrict__ g_w_scales,
    int m, int n, int k) {
  gemm_body<T, kTokens, kStages, kHalves, kFull, true>(weight_map, activation_map, g_y, ldy, g_a_scales, g_w_scales,
                                                       nullptr, m, n, k, 0, 0);
}

// A tensor map of a row-major e4m3 matrix [rows, cols] (cols % 16 == 0, 16-byte aligned base) in
// boxes of box_rows x 128 bytes with the 128-byte swizzle; out-of-range rows and columns read as
// zeros. Returns false where the driver refuses (the caller says why).
inline bool make_fp8_tensor_map(CUtensorMap* map, const void* base, int64_t rows, int64_t cols, int box_rows) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      function = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  }();
  if (!encode) return false;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols)};
  const cuuint32_t box[2] = {cuuint32_t(kBlockK), cuuint32_t(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace vt::cuda::wgmma_gemm
