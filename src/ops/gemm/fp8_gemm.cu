// FP8 block-scaled linears: per-token 1x128 activation quantisation, and the small-M kernels the
// GEMM registry (registry.h) measures per shape: CUDA-core GEMVs for M = 1 (warp per column
// group, split-K) and a tensor-core split-K kernel; every one applies the activation and weight block scales in fp32 and reduces in a
// fixed order (deterministic).
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"
#include "ops/gemm/fp8_gemm_wgmma.h"
#include "ops/gemm/fp8_mma.cuh"
#include "ops/gemm/gemm.h"
#include "ops/gemm/partials.h"

namespace vt::cuda {
namespace {

constexpr int kGroup = 128;  // activation group and weight block width along K
constexpr int kQuantThreads = 128;
static_assert(kQuantThreads == kGroup, "one thread per element of a group");
constexpr int kBytesPerLane = 16;
static_assert(kGroup % kBytesPerLane == 0, "a lane's 16 weights lie in one scale block");

// Grid (row, group): absmax over the group, scale = max(absmax, 1e-10) / 448, e4m3(x / scale).
template <typename T>
__global__ void sm90_fp8_quantize_rows(uint8_t* __restrict__ g_q, float* __restrict__ g_scales,
                                       const T* __restrict__ g_x, int64_t k) {
  __shared__ float s_max[kQuantThreads / 32];
  device::pdl_enter();
  const int64_t row = blockIdx.x, column = int64_t(blockIdx.y) * kGroup + threadIdx.x;
  const float value = column < k ? device::to_float(g_x[row * k + column]) : 0.0f;
  const float local = device::warp_max(fabsf(value));
  if (threadIdx.x % 32 == 0) s_max[threadIdx.x / 32] = local;
  __syncthreads();
  float absmax = 0.0f;
  for (int w = 0; w < kQuantThreads / 32; ++w) absmax = fmaxf(absmax, s_max[w]);
  const float scale = fmaxf(absmax, 1e-10f) / 448.0f;
  if (column < k) {
    const float scaled = fminf(fmaxf(value / scale, -448.0f), 448.0f);
    g_q[row * k + column] = __nv_fp8_e4m3(scaled).__x;
  }
  if (threadIdx.x == 0) g_scales[row * gridDim.y + blockIdx.y] = scale;
}

// M = 1 (single-stream decode), CUDA cores: a warp owns kCols consecutive output columns and a
// 1/kSplit slice of K (whole 512-byte pieces); each round every lane loads kUnroll 16-byte pieces
// of each of its rows (a warp load is 512 contiguous bytes of one row) and the next round's loads
// are issued before this round is used; the activation codes are converted once per round for
// all kCols rows. kSplit warps of a block share a column group and meet in shared memory in a
// fixed order (deterministic). The first round is loaded before the PDL wait (weights are
// constant). Few bytes per warp in flight and many warps beat deep per-warp unrolling on Hopper
// (scripts/gpu/gemv_explore.cu sweeps the variants): (kWarps, kUnroll, kCols, kSplit) =
// (4, 1, 2, 1) on the wide shapes, (4, 1, 4, 2) on the narrow (N = 5120) ones.
template <typename T, int kWarps, int kUnroll, int kCols, int kSplit>
__device__ __forceinline__ void fp8_gemv_columns(
    T* __restrict__ g_y, const uint8_t* __restrict__ g_a, const float* __restrict__ g_a_scales,
    const uint8_t* __restrict__ g_w, const float* __restrict__ g_w_scales, int64_t n, int64_t k) {
  static_assert(kWarps % kSplit == 0 && kCols <= 32, "whole column groups per block");
  constexpr int64_t kPiece = 32 * kBytesPerLane, kRound = int64_t(kUnroll) * kPiece;
  __shared__ float s_partial[kWarps][kCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, slice = warp % kSplit;
  const int64_t column0 = (int64_t(blockIdx.x) * (kWarps / kSplit) + warp / kSplit) * kCols;
  const int64_t pieces = (k + kPiece - 1) / kPiece, per = (pieces + kSplit - 1) / kSplit;
  const int64_t begin = min(k, slice * per * kPiece), end = min(k, (slice + 1) * per * kPiece);
  uint4 r_next[kCols][kUnroll];
  const auto load_round = [&](int64_t round) {
#pragma unroll
    for (int c = 0; c < kCols; ++c)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t k0 = round + u * kPiece + lane * kBytesPerLane;
        r_next[c][u] = k0 < end && column0 + c < n
                           ? __ldcs(reinterpret_cast<const uint4*>(g_w + (column0 + c) * k + k0))
                           : make_uint4(0, 0, 0, 0);
      }
  };
  if (begin < end) load_round(begin);
  device::pdl_enter();
  const int64_t k_blocks = (k + kGroup - 1) / kGroup;
  float r_acc[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) r_acc[c] = 0.0f;
  for (int64_t round = begin; round < end; round += kRound) {
    uint4 r_w[kCols][kUnroll];
#pragma unroll
    for (int c = 0; c < kCols; ++c)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) r_w[c][u] = r_next[c][u];
    if (round + kRound < end) load_round(round + kRound);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k0 = round + u * kPiece + lane * kBytesPerLane;
      if (k0 >= end) break;
      float r_af[kBytesPerLane];
      device::fp8x16_to_float(*reinterpret_cast<const uint4*>(g_a + k0), r_af);
      const float a_scale = g_a_scales[k0 / kGroup];
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        float r_wf[kBytesPerLane];
        device::fp8x16_to_float(r_w[c][u], r_wf);
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kBytesPerLane; ++e) dot += r_af[e] * r_wf[e];
        const int64_t column = min(column0 + c, n - 1);
        r_acc[c] += dot * (a_scale * g_w_scales[(column / kGroup) * k_blocks + k0 / kGroup]);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kCols; ++c) r_acc[c] = device::warp_sum(r_acc[c]);
  float mine = r_acc[0];  // lane c keeps column c's total
#pragma unroll
  for (int c = 1; c < kCols; ++c) mine = lane == c ? r_acc[c] : mine;
  if constexpr (kSplit == 1) {
    if (lane < kCols && column0 + lane < n) g_y[column0 + lane] = device::from_float<T>(mine);
  } else {
    if (lane < kCols) s_partial[warp][lane] = mine;
    __syncthreads();
    if (slice == 0 && lane < kCols && column0 + lane < n) {
      float total = s_partial[warp][lane];
      for (int other = 1; other < kSplit; ++other) total += s_partial[warp + other][lane];
      g_y[column0 + lane] = device::from_float<T>(total);
    }
  }
}

// The two M = 1 CUDA-core backends, (kWarps, kUnroll, kCols, kSplit) = (4, 1, 2, 1) and (4, 1, 4, 2).
constexpr int kGemvWarps = 4, kGemvCols = 2, kGemvSplitCols = 4, kGemvSplit = 2;

template <typename T>
__global__ void __launch_bounds__(kGemvWarps * 32) sm90_fp8_gemv(
    T* __restrict__ g_y, const uint8_t* __restrict__ g_a, const float* __restrict__ g_a_scales,
    const uint8_t* __restrict__ g_w, const float* __restrict__ g_w_scales, int64_t n, int64_t k) {
  fp8_gemv_columns<T, kGemvWarps, 1, kGemvCols, 1>(g_y, g_a, g_a_scales, g_w, g_w_scales, n, k);
}

template <typename T>
__global__ void __launch_bounds__(kGemvWarps * 32) sm90_fp8_gemv_splitk(
    T* __restrict__ g_y, const uint8_t* __restrict__ g_a, const float* __restrict__ g_a_scales,
    const uint8_t* __restrict__ g_w, const float* __restrict__ g_w_scales, int64_t n, int64_t k) {
  fp8_gemv_columns<T, kGemvWarps, 1, kGemvSplitCols, kGemvSplit>(g_y, g_a, g_a_scales, g_w, g_w_scales, n, k);
}

// Tensor-core FP8 for small M (<= 16 rows per launch): one block per 8 output columns, its eight
// warps splitting K by 128-blocks and meeting in a fixed-order shared-memory sum (deterministic).
// The MMA step (operands, exactness, block scales) is in ops/gemm/fp8_mma.cuh.
constexpr int kMmaWarps = 8;
constexpr int kMmaBlocksPerStep = 2;  // 128-blocks loaded per step: 64 bytes per lane in flight
constexpr int kMmaColumns = 8;
constexpr int kMmaRows = 64;  // rows per launch: 4 tiles of 16

// kTiles 16-row tiles of A per launch (M <= 16 * kTiles): each weight chunk is loaded once and
// fed to the MMAs of every tile, so the weights stream once for up to 64 rows. Tile 0's
// activations are loaded with the weights; further tiles' (L2-resident) ones next to their MMAs.
template <typename T, int kTiles>
__global__ void __launch_bounds__(kMmaWarps * 32) sm90_fp8_gemm_mma_splitk(
    T* __restrict__ g_y, int64_t ldy, const uint8_t* __restrict__ g_a, const float* __restrict__ g_a_scales,
    const uint8_t* __restrict__ g_w, const float* __restrict__ g_w_scales, int64_t m, int64_t n, int64_t k) {
  __shared__ float s_partial[kMmaWarps][32][4 * kTiles];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, quad = lane % 4;
  const int64_t n0 = int64_t(blockIdx.x) * kMmaColumns, column = n0 + group;
  const int64_t k_blocks = (k + kGroup - 1) / kGroup;
  const bool column_ok = column < n;
  const uint8_t* weight_row = g_w + column * k;
  // Weights are constant: pull the warp's first step into L2 while the previous kernel finishes.
#pragma unroll
  for (int chunk = 0; chunk < 2 * kMmaBlocksPerStep; ++chunk) {
    const int64_t k0 = int64_t(warp) * kMmaBlocksPerStep * kGroup + chunk * 64 + quad * 16;
    if (column_ok && k0 < k) device::prefetch_l2(weight_row + k0);
  }
  device::pdl_enter();
  const float* w_scales = g_w_scales + (n0 / kGroup) * k_blocks;
  float r_acc[kTiles][4];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) r_acc[t][0] = r_acc[t][1] = r_acc[t][2] = r_acc[t][3] = 0.0f;
  // Warp w takes 128-blocks w*S .. w*S+S-1, then (w + warps)*S ..., with S = kMmaBlocksPerStep.
  for (int64_t first = int64_t(warp) * kMmaBlocksPerStep; first < k_blocks; first += kMmaWarps * kMmaBlocksPerStep) {
    constexpr int kChunks = 2 * kMmaBlocksPerStep;  // 64-byte chunks
    uint4 r_w[kChunks], r_a0[kChunks], r_a1[kChunks];
#pragma unroll
    for (int chunk = 0; chunk < kChunks; ++chunk) {
      const int64_t k0 = first * kGroup + chunk * 64 + quad * 16;
      const bool in_k = k0 < k;
      r_w[chunk] = column_ok && in_k ? __ldcs(reinterpret_cast<const uint4*>(weight_row + k0)) : make_uint4(0, 0, 0, 0);
      r_a0[chunk] = fp8_row_chunk(group < m ? g_a + int64_t(group) * k : nullptr, k0, k);
      r_a1[chunk] = fp8_row_chunk(group + 8 < m ? g_a + int64_t(group + 8) * k : nullptr, k0, k);
    }
#pragma unroll
    for (int step = 0; step < kMmaBlocksPerStep; ++step) {
      const int64_t block = first + step;
      if (block >= k_blocks) break;
      const float w_scale = w_scales[block];
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        const int64_t row0 = 16 * t + group, row1 = row0 + 8;
        if (16 * t >= m) break;  // uniform over the block
        const float scale0 = row0 < m ? g_a_scales[row0 * k_blocks + block] * w_scale : 0.0f;
        const float scale1 = row1 < m ? g_a_scales[row1 * k_blocks + block] * w_scale : 0.0f;
        fp8_mma_tile_block(r_acc[t], r_w, r_a0, r_a1, t == 0, row0 < m ? g_a + row0 * k : nullptr,
                           row1 < m ? g_a + row1 * k : nullptr, step, block, k, quad, scale0, scale1);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) s_partial[warp][lane][4 * t + i] = r_acc[t][i];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    float r_sum[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      r_sum[i] = s_partial[0][lane][4 * t + i];
      for (int w = 1; w < kMmaWarps; ++w) r_sum[i] += s_partial[w][lane][4 * t + i];
    }
    // C fragment: c0, c1 at row `group`, columns n0 + 2*quad + {0, 1}; c2, c3 at row group + 8.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = 16 * t + group + (i >= 2 ? 8 : 0), out_column = n0 + 2 * quad + (i % 2);
      if (row < m && out_column < n) g_y[row * ldy + out_column] = device::from_float<T>(r_sum[i]);
    }
  }
}

// Block (128-row block, 128-column block) of a weight [n, k]: scale = max(absmax, 1e-12) / 448,
// codes e4m3(w / scale): the checkpoint's 128x128 `weight_scale_inv` format.
template <typename T>
__global__ void __launch_bounds__(256) sm90_fp8_quantize_weight_blocks(uint8_t* __restrict__ g_q,
                                                                       float* __restrict__ g_scales,
                                                                       const T* __restrict__ g_w, int64_t n, int64_t k) {
  __shared__ float s_scratch[8];
  const int64_t row0 = int64_t(blockIdx.x) * kGroup, col0 = int64_t(blockIdx.y) * kGroup;
  float absmax = 0.0f;
  for (int i = threadIdx.x; i < kGroup * kGroup; i += blockDim.x) {
    const int64_t row = row0 + i / kGroup, col = col0 + i % kGroup;
    if (row < n && col < k) absmax = fmaxf(absmax, fabsf(device::to_float(g_w[row * k + col])));
  }
  const float scale = fmaxf(device::block_max(absmax, s_scratch), 1e-12f) / 448.0f;
  for (int i = threadIdx.x; i < kGroup * kGroup; i += blockDim.x) {
    const int64_t row = row0 + i / kGroup, col = col0 + i % kGroup;
    if (row < n && col < k)
      g_q[row * k + col] = __nv_fp8_e4m3(fminf(fmaxf(device::to_float(g_w[row * k + col]) / scale, -448.0f), 448.0f)).__x;
  }
  if (threadIdx.x == 0) g_scales[blockIdx.x * gridDim.y + blockIdx.y] = scale;
}

// scales [m, kb] -> out [kb, ld] (cuBLASLt's VEC128 layout for the activation scales). Walked in
// the output's order: the writes coalesce and the strided reads hit the few-hundred-KB input in
// L2 (walking the input's order scattered every write: 14 us a launch at 2048 x 40 on the H200).
__global__ void sm90_transpose_scales(float* __restrict__ g_out, const float* __restrict__ g_in, int64_t m, int64_t kb,
                                      int64_t ld) {
  device::pdl_enter();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < m * kb; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t block = i / m, row = i % m;
    g_out[block * ld + row] = g_in[row * kb + block];
  }
}

}  // namespace

void transpose_scales(float* out, const float* in, int64_t m, int64_t kb, int64_t n, cudaStream_t stream,
                      int64_t ld) {
  if (m * kb == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>((m * kb + 255) / 256, 1024));
  // Part of the cuBLASLt block-scaled path: attributed to the GEMM's op.
  const ::vt::trace::LaunchCost cost{"cublaslt", {m, n, kb * 128, 0}, 2.0 * double(m * kb) * sizeof(float), 0,
                                       ::vt::trace::OpGroup::kGemmOther};
  launch("sm90_transpose_scales", cost, sm90_transpose_scales, dim3(blocks), dim3(256), 0, stream, out, in, m, kb,
         ld > 0 ? ld : m);
}

void fp8_quantize_weight_blocks(uint8_t* q, float* scales, const void* w, DType dtype, int64_t n, int64_t k,
                                cudaStream_t stream) {
  VT_CHECK(n > 0 && k > 0, "fp8_quantize_weight_blocks: ", n, " x ", k);
  const dim3 grid(unsigned((n + kGroup - 1) / kGroup), unsigned((k + kGroup - 1) / kGroup));
  VT_DISPATCH_ACT(dtype, T,
                  sm90_fp8_quantize_weight_blocks<T><<<grid, 256, 0, stream>>>(q, scales, static_cast<const T*>(w), n, k));
  VT_CUDA_CHECK_LAUNCH("sm90_fp8_quantize_weight_blocks");
}

void fp8_quantize_rows(uint8_t* q, float* scales, const void* x, int64_t m, int64_t k, DType act,
                       cudaStream_t stream) {
  VT_CHECK(m >= 0 && k > 0 && m <= INT32_MAX, "fp8_quantize_rows: m ", m, " k ", k);
  if (m == 0) return;
  dim3 grid(unsigned(m), unsigned((k + kGroup - 1) / kGroup));
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_fp8_quantize_rows",
                         ::vt::trace::LaunchCost{"cuda", {m, k, 0, 0},
                                                   double(m) * double(k) * (double(dtype_size(act)) + 1) +
                                                       double(m) * double(grid.y) * 4,
                                                   0, ::vt::trace::OpGroup::kQuantize},
                         sm90_fp8_quantize_rows<T>, grid, dim3(kQuantThreads), 0, stream, q,
                         scales, static_cast<const T*>(x), k));
}

const char* fp8_gemm_kernel_name(Fp8GemmBackend backend) {
  VT_CHECK(backend != Fp8GemmBackend::kAuto, "fp8_gemm_kernel_name: auto is not a kernel");
  return backend == Fp8GemmBackend::kMma          ? "sm90_fp8_gemm_mma_splitk"
         : backend == Fp8GemmBackend::kWgmma      ? "sm90_fp8_gemm_wgmma"
         : backend == Fp8GemmBackend::kWgmmaCluster ? "sm90_fp8_gemm_wgmma_cluster"
         : backend == Fp8GemmBackend::kGemv       ? "sm90_fp8_gemv"
                                                  : "sm90_fp8_gemv_splitk";
}

int64_t fp8_gemm_launches(Fp8GemmBackend backend, int64_t m) {
  return backend == Fp8GemmBackend::kMma     ? (m + kMmaRows - 1) / kMmaRows
         : backend == Fp8GemmBackend::kWgmma || backend == Fp8GemmBackend::kWgmmaCluster ? fp8_gemm_wgmma_launches(m)
                                             : 1;
}

void fp8_gemm_prepare(cudaStream_t stream) { fp8_gemm_wgmma_prepare(stream); }

namespace {

// What every backend must move: the weights and their scales once, the activation codes and
// scales, the output; 2mnk FLOPs.
::vt::trace::LaunchCost gemm_cost(const char* backend_name, int64_t rows, int64_t n, int64_t k, DType act) {
  const double k_blocks = double((k + kGroup - 1) / kGroup), n_blocks = double((n + kGroup - 1) / kGroup);
  return ::vt::trace::LaunchCost{backend_name,
                                   {rows, n, k, 0},
                                   double(n) * double(k) + n_blocks * k_blocks * 4 + double(rows) * double(k) +
                                       double(rows) * k_blocks * 4 + double(rows) * double(n) * double(dtype_size(act)),
                                   2.0 * double(rows) * double(n) * double(k),
                                   ::vt::trace::OpGroup::kGemmOther};
}

}  // namespace

GemmPartials fp8_block_gemm_partials(const uint8_t* q, const float* a_scales, const uint8_t* w, const float* w_scales,
                                     int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  VT_CHECK(k % kBytesPerLane == 0, "fp8_block_gemm_partials: K = ", k, " must be a multiple of ", kBytesPerLane);
  VT_CHECK(reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(q) % 16 == 0,
           "fp8_block_gemm_partials: operands must be 16-byte aligned");
  // The output's must-move bytes as fp32 (what the norm reads is more: each tile's shares).
  return fp8_gemm_wgmma_partials(q, a_scales, w, w_scales, m, n, k, stream,
                                 gemm_cost("wgmma_partials", m, n, k, DType::kF32));
}
void fp8_gemm_release(cudaStream_t stream) { fp8_gemm_wgmma_release(stream); }

void fp8_block_gemm(void* y, int64_t ldy, const uint8_t* q, const float* a_scales, const uint8_t* w,
                    const float* w_scales, int64_t m, int64_t n, int64_t k, DType act, cudaStream_t stream,
                    Fp8GemmBackend backend) {
  VT_CHECK(ldy >= n, "fp8_block_gemm: ldy ", ldy, " < n ", n);
  VT_CHECK(k % kBytesPerLane == 0, "fp8_block_gemm: K = ", k, " must be a multiple of ", kBytesPerLane);
  VT_CHECK(reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(q) % 16 == 0,
           "fp8_block_gemm: operands must be 16-byte aligned");
  if (m == 0 || n == 0) return;
  // kAuto: the CUDA-core gemv at M = 1, tensor cores above. The per-shape measured choice and the
  // VT_GEMM_BACKEND override are the GEMM registry's (registry.h).
  VT_CHECK(backend != Fp8GemmBackend::kGemv || m == 1, "fp8_block_gemm: the gemv backend serves M = 1, not ", m);
  if (backend == Fp8GemmBackend::kAuto) backend = m == 1 ? Fp8GemmBackend::kGemv : Fp8GemmBackend::kMma;
  const auto cost_rows = [&](const char* backend_name, int64_t rows) { return gemm_cost(backend_name, rows, n, k, act); };
  const auto cost = [&](const char* backend_name) { return cost_rows(backend_name, m); };
  if (backend == Fp8GemmBackend::kWgmma) {
    fp8_gemm_wgmma(y, ldy, q, a_scales, w, w_scales, m, n, k, act, stream,
                   [&](int64_t rows) { return cost_rows("wgmma", rows); });
    return;
  }
  if (backend == Fp8GemmBackend::kWgmmaCluster) {
    fp8_gemm_wgmma_cluster(y, ldy, q, a_scales, w, w_scales, m, n, k, act, stream,
                           [&](int64_t rows) { return cost_rows("wgmma_cluster", rows); });
    return;
  }
  if (backend == Fp8GemmBackend::kGemvSplitK || backend == Fp8GemmBackend::kGemv) {
    VT_CHECK(m == 1, "fp8_block_gemm: the ", backend == Fp8GemmBackend::kGemv ? "gemv" : "gemv_splitk",
             " backend serves M = 1, not ", m);
    if (backend == Fp8GemmBackend::kGemv) {
      constexpr int64_t columns_per_block = kGemvWarps * kGemvCols;
      const dim3 blocks(unsigned((n + columns_per_block - 1) / columns_per_block)), threads(kGemvWarps * 32);
      VT_DISPATCH_ACT(act, T,
                      launch("sm90_fp8_gemv", cost("gemv"), sm90_fp8_gemv<T>, blocks, threads, 0, stream,
                             static_cast<T*>(y), q, a_scales, w, w_scales, n, k));
    } else {
      constexpr int64_t columns_per_block = kGemvWarps / kGemvSplit * kGemvSplitCols;
      const dim3 blocks(unsigned((n + columns_per_block - 1) / columns_per_block)), threads(kGemvWarps * 32);
      VT_DISPATCH_ACT(act, T,
                      launch("sm90_fp8_gemv_splitk", cost("gemv_splitk"), sm90_fp8_gemv_splitk<T>, blocks, threads, 0,
                             stream, static_cast<T*>(y), q, a_scales, w, w_scales, n, k));
    }
    return;
  }
  VT_CHECK(backend == Fp8GemmBackend::kMma, "fp8_block_gemm: no such backend");
  const size_t element = dtype_size(act);
  const int64_t k_blocks = (k + kGroup - 1) / kGroup;
  for (int64_t m0 = 0; m0 < m; m0 += kMmaRows) {
    const int64_t rows = std::min<int64_t>(kMmaRows, m - m0);
    const unsigned blocks = unsigned((n + kMmaColumns - 1) / kMmaColumns);
    VT_DISPATCH_ACT(act, T, {
      auto kernel = rows <= 16 ? sm90_fp8_gemm_mma_splitk<T, 1>
                    : rows <= 32 ? sm90_fp8_gemm_mma_splitk<T, 2>
                                 : sm90_fp8_gemm_mma_splitk<T, 4>;
      launch("sm90_fp8_gemm_mma_splitk", cost_rows("mma", rows), kernel, dim3(blocks), dim3(kMmaWarps * 32), 0, stream,
             reinterpret_cast<T*>(static_cast<char*>(y) + m0 * ldy * element), ldy, q + m0 * k, a_scales + m0 * k_blocks,
             w, w_scales, rows, n, k);
    });
  }
}

}  // namespace vt::cuda
