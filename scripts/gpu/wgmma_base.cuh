// Small-M FP8 block-scaled GEMM on Hopper's own paths: the bulk tensor copy engine (TMA) streams
// 128 x 128 weight blocks through a ring of shared-memory stages and wgmma multiplies them with
// the activation rows, weights as the A operand ("swap AB": 64 weight rows per instruction, the
// M <= 64 tokens as the instruction's N, so nothing is padded to 64 tokens).
//
// The work is a stream-K split over a persistent grid: the weight matrix is a sequence of
// U = tiles x k_blocks units (a tile is 64 or 128 output columns; a unit is one tile's 128-byte
// slice of K, 16 KB at 128 rows), and CTA c of C takes units [c U / C, (c + 1) U / C), so every
// CTA streams the same number of bytes whatever the shape. A tile wholly inside one CTA is
// written directly. A tile shared by several CTAs is summed by its first owner, whose share ends
// its range (so it finishes last): it adds the later owners' fp32 partials in CTA order (the
// result is bit-identical run to run). Each partial word carries a flag in its upper half, so the
// reader needs no fence or counter: it reloads until every word is flagged, then clears them for
// the next call (which cannot start before this grid ends: its consumers wait on PDL). The first
// owner waits on CTAs that never wait on it, and all C CTAs are resident (C <= SMs), so this ends.
//
// Per unit the consumer warpgroup runs wgmma m64nNk32 (each 64-row half x four k32 steps)
// into a block accumulator, then adds block x w_scale x a_scale[token] into the fp32 total
// (the block scales of the 1 x 128 / 128 x 128 format, applied per 128-K block as the CPU
// reference does). One producer warp issues the copies; weights, being constant, are requested
// for the first stages before the programmatic-launch wait, activations after it.
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

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/mbarrier.cuh"

namespace vt::cuda::wgmma_gemm {

constexpr int kBlockK = 128;  // K bytes per unit: one scale block, the 128-byte swizzle span
constexpr int kConsumerThreads = 128;            // one warpgroup, warps 0..3
constexpr int kThreads = kConsumerThreads + 32;  // + the producer warp
constexpr int kScaleAhead = 2;                   // units whose scales are in flight beyond the current one

// A tile is kHalves x 64 weight rows; a stage holds its 128 x 128-byte block and the tokens' block.
template <int kTokens, int kHalves>
__host__ __device__ constexpr uint32_t stage_bytes() {
  return uint32_t(kHalves) * 64 * kBlockK + uint32_t(kTokens) * kBlockK;
}
// Dynamic shared memory: the stages (1024-byte aligned for the swizzle), the barriers, alignment slack.
template <int kTokens, int kStages, int kHalves>
constexpr size_t shared_bytes() {
  return size_t(kStages) * stage_bytes<kTokens, kHalves>() + 2 * kStages * sizeof(uint64_t) + 16 + 1024;
}

__host__ __device__ __forceinline__ int64_t unit_begin(int64_t cta, int64_t units, int64_t ctas) {
  return cta * units / ctas;
}
__host__ __device__ __forceinline__ int64_t unit_owner(int64_t unit, int64_t units, int64_t ctas) {
  return ((unit + 1) * ctas - 1) / units;
}

using device::barrier_arrive;
using device::barrier_expect_bytes;
using device::barrier_init;
using device::barrier_wait;
using device::smem_address;

// A 2-D box of `map` at (x = K offset, y = row offset) into shared memory, completing on `barrier`.
__device__ __forceinline__ void tma_load_2d(void* destination, const CUtensorMap* map, int32_t x, int32_t y,
                                            uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_address(destination)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_address(barrier))
      : "memory");
}

// A shared tile's partials: one 64-bit word per value, (flag << 32) | float bits, so that each word
// says by itself whether it holds this call's value: no fence, no counter. The reader clears it.
constexpr uint32_t kPartialFlag = 0x600dcafe;
__device__ __forceinline__ void store_relaxed(uint64_t* address, uint64_t value) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(address), "l"(value) : "memory");
}
__device__ __forceinline__ uint64_t load_relaxed(const uint64_t* address) {
  uint64_t value;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
  return value;
}
__device__ __forceinline__ void store_flagged(uint64_t* address, float value) {
  store_relaxed(address, (uint64_t(kPartialFlag) << 32) | __float_as_uint(value));
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

// What a launch does: everything (kFull), or, for the sweep's overhead measurements only (wrong
// results), every tile stored without the shared-tile sum (kNoFixup), the copies alone
// (kStreamOnly), or kNoFixup without the scale loads or the multiplies.
enum Mode { kFull = 0, kNoFixup = 1, kStreamOnly = 2, kNoScaleLoads = 3, kNoMultiplies = 4 };

// The accumulator fragment of m64nN (per thread, N / 2 floats): register 4c + 2h + e holds row
// 16 warp + lane / 4 + 8 h of the 64, column (token) 8c + 2 (lane % 4) + e.
template <typename T, int kTokens, int kStages, int kHalves, int kMode = kFull>
__global__ void __launch_bounds__(kThreads, 1) sm90_fp8_gemm_wgmma(
    const __grid_constant__ CUtensorMap weight_map, const __grid_constant__ CUtensorMap activation_map,
    T* __restrict__ g_y, int64_t ldy, const float* __restrict__ g_a_scales, const float* __restrict__ g_w_scales,
    uint64_t* __restrict__ g_partials, int m, int n, int k) {
  static_assert(kTokens == 8 || kTokens == 16 || kTokens == 32 || kTokens == 64, "wgmma N of 8..64 tokens");
  static_assert(kHalves == 1 || kHalves == 2, "tiles of 64 or 128 weight rows");
  constexpr int kTileRows = 64 * kHalves;
  constexpr int kRegs = kTokens / 2;  // per 64-row half
  constexpr uint32_t kStageBytes = stage_bytes<kTokens, kHalves>(), kWeightBytes = kTileRows * kBlockK;
  extern __shared__ uint8_t s_raw[];
  uint8_t* s_stages = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(s_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* s_full = reinterpret_cast<uint64_t*>(s_stages + size_t(kStages) * kStageBytes);
  uint64_t* s_empty = s_full + kStages;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t k_blocks = (k + kBlockK - 1) / kBlockK, tiles = (n + kTileRows - 1) / kTileRows;
  const int64_t units = tiles * k_blocks, ctas = gridDim.x, cta = blockIdx.x;
  const int64_t begin = unit_begin(cta, units, ctas), end = unit_begin(cta + 1, units, ctas);

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
      const int64_t ahead = begin + kStages < end ? begin + kStages : end;
      // Weights are constant: the first stages' blocks stream while the previous kernel drains.
      for (int64_t u = begin; u < ahead; ++u) {
        const int s = int((u - begin) % kStages);
        barrier_expect_bytes(&s_full[s], kStageBytes);
        tma_load_2d(s_stages + size_t(s) * kStageBytes, &weight_map, int32_t((u % k_blocks) * kBlockK),
                    int32_t((u / k_blocks) * kTileRows), &s_full[s]);
      }
      device::pdl_enter();
      for (int64_t u = begin; u < ahead; ++u) {
        const int s = int((u - begin) % kStages);
        tma_load_2d(s_stages + size_t(s) * kStageBytes + kWeightBytes, &activation_map,
                    int32_t((u % k_blocks) * kBlockK), 0, &s_full[s]);
      }
      for (int64_t u = ahead; u < end; ++u) {
        const int64_t i = u - begin;
        const int s = int(i % kStages);
        barrier_wait(&s_empty[s], uint32_t((i / kStages - 1) & 1));
        barrier_expect_bytes(&s_full[s], kStageBytes);
        uint8_t* stage = s_stages + size_t(s) * kStageBytes;
        const int32_t x = int32_t((u % k_blocks) * kBlockK);
        tma_load_2d(stage, &weight_map, x, int32_t((u / k_blocks) * kTileRows), &s_full[s]);
        tma_load_2d(stage + kWeightBytes, &activation_map, x, 0, &s_full[s]);
      }
    }
    return;
  }

  // The consumer warpgroup.
  device::pdl_wait();
  const int quad = lane % 4;
  float r_total[kHalves][kRegs], r_block[kHalves][kRegs];
#pragma unroll
  for (int h = 0; h < kHalves; ++h)
#pragma unroll
    for (int r = 0; r < kRegs; ++r) r_total[h][r] = 0.0f;
  for (int64_t u = begin; u < end; ++u) {
    const int64_t i = u - begin, tile = u / k_blocks, kb = u % k_blocks;
    // Scales first: their loads overlap the wait for the stage and the multiplies.
    float w_scale = 1.0f, r_scale[kTokens / 4];
#pragma unroll
    for (int j = 0; j < kTokens / 4; ++j) r_scale[j] = 1.0f;
    if constexpr (kMode != kNoScaleLoads) {
      w_scale = g_w_scales[(tile * kTileRows / 128) * k_blocks + kb];
#pragma unroll
      for (int c = 0; c < kTokens / 8; ++c)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int token = 8 * c + 2 * quad + e;
          r_scale[2 * c + e] = token < m ? g_a_scales[int64_t(token) * k_blocks + kb] : 0.0f;
        }
    }
    const int s = int(i % kStages);
    barrier_wait(&s_full[s], uint32_t((i / kStages) & 1));
    const uint8_t* stage = s_stages + size_t(s) * kStageBytes;
    if constexpr (kMode == kStreamOnly) {
      __syncwarp();
      if (lane == 0) barrier_arrive(&s_empty[s]);
      continue;
    }
    if constexpr (kMode == kNoMultiplies) {
#pragma unroll
      for (int h = 0; h < kHalves; ++h)
#pragma unroll
        for (int r = 0; r < kRegs; ++r) r_block[h][r] = float(stage[threadIdx.x + r]);
    } else {
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
    }
    __syncwarp();
    if (lane == 0) barrier_arrive(&s_empty[s]);
#pragma unroll
    for (int h = 0; h < kHalves; ++h)
#pragma unroll
      for (int r = 0; r < kRegs; ++r) r_total[h][r] += r_block[h][r] * (w_scale * r_scale[(r / 4) * 2 + (r % 2)]);
    if (kb + 1 != k_blocks && u + 1 != end) continue;

    // The CTA's share of this tile is done.
    const int64_t owner_first = unit_owner(tile * k_blocks, units, ctas);
    const int64_t owner_last = unit_owner(tile * k_blocks + k_blocks - 1, units, ctas);
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
    if (owner_first == owner_last || kMode != kFull) {
      store(r_total);
    } else if (cta != owner_first) {
      // This is the first tile of the CTA's range (it starts inside the tile): hand the partial
      // to the tile's first owner, which finishes its share last (at the end of its range).
      uint64_t* mine = g_partials + cta * (kHalves * kRegs * kConsumerThreads) + threadIdx.x;
#pragma unroll
      for (int h = 0; h < kHalves; ++h)
#pragma unroll
        for (int r = 0; r < kRegs; ++r) store_flagged(mine + (h * kRegs + r) * kConsumerThreads, r_total[h][r]);
    } else {
      // The first owner sums: its own share, then the later owners' in CTA order (deterministic),
      // each word read until its flag says it is this call's, and cleared for the next call.
#pragma unroll 1
      for (int64_t owner = owner_first + 1; owner <= owner_last; ++owner) {
        uint64_t* theirs = g_partials + owner * (kHalves * kRegs * kConsumerThreads) + threadIdx.x;
        uint64_t r_words[kHalves][kRegs];
        bool ready;
        do {
#pragma unroll
          for (int h = 0; h < kHalves; ++h)
#pragma unroll
            for (int r = 0; r < kRegs; ++r) r_words[h][r] = load_relaxed(theirs + (h * kRegs + r) * kConsumerThreads);
          ready = true;
#pragma unroll
          for (int h = 0; h < kHalves; ++h)
#pragma unroll
            for (int r = 0; r < kRegs; ++r) ready = ready && (r_words[h][r] >> 32) == kPartialFlag;
        } while (!ready);
#pragma unroll
        for (int h = 0; h < kHalves; ++h)
#pragma unroll
          for (int r = 0; r < kRegs; ++r) {
            r_total[h][r] += __uint_as_float(uint32_t(r_words[h][r]));
            store_relaxed(theirs + (h * kRegs + r) * kConsumerThreads, 0);
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
