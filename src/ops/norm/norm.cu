// RMSNorm with the residual add fused in: one block per row, fp32 accumulation, fixed
// reduction order (bit-reproducible). When the row width allows (a multiple of 128), the row
// lives in registers, 8 values per thread, and the FP8 quantisation of the output for the next
// (W8A8) linear is fused in: one kernel instead of norm + quantise. Also two rows normed into one
// (the MTP head's fc input).
#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "ops/norm/norm.h"

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"
#include "ops/gemm/fp8_gemm_split.h"
#include "ops/gemm/partials.h"

namespace vt::cuda {
namespace {

constexpr int kThreads = 1024;  // one block per row: at decode a row is all the work there is
constexpr int kMaxChunks = 4;   // 8-value chunks per thread in the register kernel: n <= 32,768

template <typename T>
__global__ void sm90_add_rms_norm(T* __restrict__ g_out, T* __restrict__ g_residual, const T* __restrict__ g_branch,
                                  const float* __restrict__ g_w, int64_t n, float eps, float weight_offset) {
  __shared__ float s_scratch[kThreads / 32];
  device::pdl_enter();
  T* row = g_residual + blockIdx.x * n;
  const T* branch = g_branch ? g_branch + blockIdx.x * n : nullptr;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    float value = device::to_float(row[i]);
    if (branch) {
      value += device::to_float(branch[i]);
      row[i] = device::from_float<T>(value);
      value = device::to_float(row[i]);  // normalise what the residual stream holds
    }
    sum += value * value;
  }
  const float scale = rsqrtf(device::block_sum(sum, s_scratch) / float(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads)
    g_out[blockIdx.x * n + i] = device::from_float<T>(device::to_float(row[i]) * scale * (weight_offset + g_w[i]));
}

// Eight values of a row of a GEMM output left as partials (GemmPartials): the shares of the
// chunk's 128-column tile added in CTA order (fp8_gemm_split.h), each owner's 8 words read before
// any is added (one round trip for up to kOwnersAtOnce owners), then rounded to T as the GEMM
// stores its output.
constexpr int kOwnersAtOnce = 6;  // >= a tile's owners on the 27B shapes (5): one round trip
template <typename T>
__device__ __forceinline__ void load8_partials(const GemmPartials& p, int row, int column, float* out) {
  namespace wg = wgmma_gemm;
  const uint32_t tile = uint32_t(column) / 128, k_blocks = uint32_t(p.k_blocks);
  const wg::TileOwners owners = wg::tile_owners(tile, k_blocks, uint32_t(p.n / 128) * k_blocks, uint32_t(p.ctas));
  const float* words0 = p.words + (int64_t(tile) * p.max_owners * p.rows + row) * 128 + column % 128;
  const int64_t slot_words = int64_t(p.rows) * 128;
  const int count = int(owners.last - owners.first) + 1;
  float sum[8] = {};
  for (int first = 0; first < count; first += kOwnersAtOnce) {
    float words[kOwnersAtOnce][8];
#pragma unroll
    for (int o = 0; o < kOwnersAtOnce; ++o)
      if (first + o < count) device::load8(words0 + (first + o) * slot_words, words[o]);
#pragma unroll
    for (int o = 0; o < kOwnersAtOnce; ++o) {
      if (first + o >= count) break;
#pragma unroll
      for (int i = 0; i < 8; ++i) sum[i] = first + o == 0 ? words[o][i] : sum[i] + words[o][i];
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = device::to_float(device::from_float<T>(sum[i]));
}

// Eight values of a row of a MoE layer's pairs (MoePairs): the weighted sum over the row's top_k
// pairs in order, in f32, rounded to T: moe_combine's arithmetic, so the same bits as its stored
// output.
template <typename T, int kAhead>
__device__ __forceinline__ void load8_pairs(const MoePairs& p, int row, int64_t n, int64_t column, float* out) {
  const T* values = static_cast<const T*>(p.values);
  float sum[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  // kAhead pairs' loads in flight before their sums (a loop of one load at a time waits out a round
  // trip per pair), kept packed until summed, in pair order.
  for (int64_t j0 = 0; j0 < p.top_k; j0 += kAhead) {
    float weight[kAhead];
    device::Packed8<T> in[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t pair = int64_t(row) * p.top_k + j0 + u;
      if (j0 + u < p.top_k) {
        weight[u] = p.weights[pair];
        device::load_packed8(values + pair * n + column, in[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kAhead; ++u)
      if (j0 + u < p.top_k) {
        float r_in[8];
        device::unpack8(in[u], r_in);
#pragma unroll
        for (int i = 0; i < 8; ++i) sum[i] += weight[u] * r_in[i];
      }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = device::to_float(device::from_float<T>(sum[i]));
}

// What the quantising norm's body adds to the residual.
enum class BranchKind { kValues, kPartials, kPairs };

// n % 128 == 0; thread t holds chunks t, t + blockDim, ... (8 values each). With g_q set, also
// writes the output's e4m3 codes [rows, n] and 1x128 scales [rows, n/128] from the rounded
// output values (bit-identical to quantising the stored output afterwards). kKind: the branch is
// g_branch's rows (or none), a GEMM's partials, or a MoE layer's pairs. kChunks: the most chunks a
// thread holds (1 where n / 8 <= kPartialThreads (n <= 5,120), whose narrower block leaves the
// registers the partials' loads need: six owners' words in flight).
constexpr int kPartialThreads = 640;
template <typename T, BranchKind kKind, int kChunks>
__device__ __forceinline__ void add_rms_norm_quant_body(T* __restrict__ g_out, T* __restrict__ g_residual,
                                                        const T* __restrict__ g_branch, const GemmPartials& partials,
                                                        const MoePairs& pairs, const float* __restrict__ g_w,
                                                        uint8_t* __restrict__ g_q, float* __restrict__ g_scales,
                                                        int64_t n, float eps, float weight_offset) {
  __shared__ float s_scratch[kThreads / 32];
  const int64_t chunks = n / 8;
  // The weights are constant: the first chunk's (all of them up to n = 8192) are read while the
  // previous kernel finishes (programmatic launch); more would not fit the 64 registers.
  float r_w0[8] = {};
  if (threadIdx.x < chunks) device::load8(g_w + threadIdx.x * 8, r_w0);
  device::pdl_enter();
  T* row = g_residual + blockIdx.x * n;
  const T* branch = g_branch ? g_branch + blockIdx.x * n : nullptr;
  float r_x[kChunks][8];
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t chunk = threadIdx.x + int64_t(c) * blockDim.x;
    if (chunk >= chunks) break;
    device::load8(row + chunk * 8, r_x[c]);
    if (kKind != BranchKind::kValues || branch) {
      float r_b[8];
      if constexpr (kKind == BranchKind::kPartials) load8_partials<T>(partials, int(blockIdx.x), int(chunk * 8), r_b);
      else if constexpr (kKind == BranchKind::kPairs)
        // One chunk a thread in bf16 (n <= 5,120, the MoE models' widths): all the 35B-A3B's 9 pairs
        // (8 routed and the shared one) at once, where four at a time waited out three round trips.
        load8_pairs<T, kChunks == 1 && sizeof(T) == 2 ? 9 : 4>(pairs, int(blockIdx.x), n, chunk * 8, r_b);
      else device::load8(branch + chunk * 8, r_b);
#pragma unroll
      for (int i = 0; i < 8; ++i) r_x[c][i] = device::round_to(r_x[c][i] + r_b[i], row);
      device::store8(row + chunk * 8, r_x[c]);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) sum += r_x[c][i] * r_x[c][i];
  }
  const float scale = rsqrtf(device::block_sum(sum, s_scratch) / float(n) + eps);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t chunk = threadIdx.x + int64_t(c) * blockDim.x;
    if (c * blockDim.x >= chunks) break;  // uniform over the block: the half-warp shuffles need every lane
    float r_y[8];
    if (chunk < chunks) {
      float r_w[8];
      if (c == 0) {
#pragma unroll
        for (int i = 0; i < 8; ++i) r_w[i] = r_w0[i];
      } else {
        device::load8(g_w + chunk * 8, r_w);
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) r_y[i] = device::round_to(r_x[c][i] * scale * (weight_offset + r_w[i]), g_out);
      device::store8(g_out + blockIdx.x * n + chunk * 8, r_y);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) r_y[i] = 0.0f;
    }
    // Whole half-warps (one 128-group) are in or out of the row, as n % 128 == 0.
    if (g_q)
      device::quantize8_half_warp(r_y, g_q + blockIdx.x * n + chunk * 8, g_scales + blockIdx.x * (n / 128) + chunk / 16,
                                  chunk < chunks, threadIdx.x % 16 == 0);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) sm90_add_rms_norm_quant(
    T* __restrict__ g_out, T* __restrict__ g_residual, const T* __restrict__ g_branch, const float* __restrict__ g_w,
    uint8_t* __restrict__ g_q, float* __restrict__ g_scales, int64_t n, float eps, float weight_offset) {
  add_rms_norm_quant_body<T, BranchKind::kValues, kMaxChunks>(g_out, g_residual, g_branch, GemmPartials{}, MoePairs{},
                                                              g_w, g_q, g_scales, n, eps, weight_offset);
}
// The same with the branch a GEMM's partials (its own name, so a profile and the kernel-ran gate
// tell it apart).
template <typename T, int kChunks>
__global__ void __launch_bounds__(kChunks == 1 ? kPartialThreads : kThreads) sm90_add_rms_norm_partials(
    T* __restrict__ g_out, T* __restrict__ g_residual, const GemmPartials partials, const float* __restrict__ g_w,
    uint8_t* __restrict__ g_q, float* __restrict__ g_scales, int64_t n, float eps, float weight_offset) {
  add_rms_norm_quant_body<T, BranchKind::kPartials, kChunks>(g_out, g_residual, nullptr, partials, MoePairs{}, g_w, g_q,
                                                             g_scales, n, eps, weight_offset);
}
// The same with the branch a MoE layer's pairs: the combine in the norm (its own name too; kChunks
// as for the partials: the pairs' loads need the registers too).
template <typename T, int kChunks>
__global__ void __launch_bounds__(kChunks == 1 ? kPartialThreads : kThreads) sm90_add_rms_norm_moe(
    T* __restrict__ g_out, T* __restrict__ g_residual, const MoePairs pairs, const float* __restrict__ g_w,
    uint8_t* __restrict__ g_q, float* __restrict__ g_scales, int64_t n, float eps, float weight_offset) {
  add_rms_norm_quant_body<T, BranchKind::kPairs, kChunks>(g_out, g_residual, nullptr, GemmPartials{}, pairs, g_w, g_q,
                                                          g_scales, n, eps, weight_offset);
}

// Two rows normed side by side: block (row, half) writes out[row, half * n, +n) from a (half 0)
// or b (half 1). The same arithmetic as sm90_add_rms_norm without a branch.
template <typename T>
__global__ void sm90_rms_norm_concat(T* __restrict__ g_out, const T* __restrict__ g_a, const float* __restrict__ g_wa,
                                     const T* __restrict__ g_b, const float* __restrict__ g_wb, int64_t n, float eps,
                                     float weight_offset) {
  __shared__ float s_scratch[kThreads / 32];
  device::pdl_enter();
  const bool second = blockIdx.y == 1;
  const T* row = (second ? g_b : g_a) + blockIdx.x * n;
  const float* w = second ? g_wb : g_wa;
  T* out = g_out + blockIdx.x * 2 * n + (second ? n : 0);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float value = device::to_float(row[i]);
    sum += value * value;
  }
  const float scale = rsqrtf(device::block_sum(sum, s_scratch) / float(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads)
    out[i] = device::from_float<T>(device::to_float(row[i]) * scale * (weight_offset + w[i]));
}

}  // namespace

void rms_norm_concat(void* out, const void* a, const float* w_a, const void* b, const float* w_b, int64_t rows,
                     int64_t n, float eps, float weight_offset, DType act, cudaStream_t stream) {
  VT_CHECK(rows >= 0 && rows <= INT32_MAX && n > 0, "rms_norm_concat: rows ", rows, " n ", n);
  VT_CHECK(out != a && out != b, "rms_norm_concat: out must not alias its inputs");
  if (rows == 0) return;
  // Both inputs read, the output written (2n per row), both weights.
  const double row_bytes = double(n) * double(dtype_size(act));
  const ::vt::trace::LaunchCost cost{
      "cuda", {rows, 2 * n, 0, 0}, double(rows) * row_bytes * 4 + double(n) * 8, 0, ::vt::trace::OpGroup::kNorm};
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_rms_norm_concat", cost, sm90_rms_norm_concat<T>, dim3(unsigned(rows), 2), dim3(kThreads),
                         0, stream, static_cast<T*>(out), static_cast<const T*>(a), w_a, static_cast<const T*>(b), w_b,
                         n, eps, weight_offset));
}

void add_rms_norm(void* out, void* residual, Branch branch, const float* w, int64_t rows, int64_t n, float eps,
                  float weight_offset, DType act, cudaStream_t stream, uint8_t* q, float* q_scales) {
  VT_CHECK(rows >= 0 && rows <= INT32_MAX && n > 0, "add_rms_norm: rows ", rows, " n ", n);
  VT_CHECK(out != residual, "add_rms_norm: out must not alias the residual");
  const bool vector = n % 128 == 0 && n / 8 <= int64_t(kMaxChunks) * kThreads;
  VT_CHECK(!q || vector, "add_rms_norm: fused FP8 output needs n % 128 == 0 (n = ", n, ")");
  const GemmPartials* partials = branch.partials;
  VT_CHECK(!partials || (vector && partials->rows == rows && partials->n == n && partials->ctas > 0),
           "add_rms_norm: a partials branch of [", partials ? partials->rows : 0, ", ", partials ? partials->n : 0,
           "] for ", rows, " x ", n, " rows (it needs n % 128 == 0)");
  const MoePairs* pairs = branch.pairs;
  VT_CHECK(!pairs || (vector && pairs->top_k > 0), "add_rms_norm: a MoE pairs branch needs n % 128 == 0 (n = ", n,
           ")");
  if (rows == 0) return;
  // Residual read (and written back when a branch is added), branch read (partials: each tile's
  // shares, fp32), output written, weight.
  const double row_bytes = double(n) * double(dtype_size(act));
  const double branch_bytes =
      partials ? double(rows) * double(n) * 4 *
                     (double(partials->ctas) / double(n / 128) + 1)  // owners per tile, about
               : pairs          ? double(rows) * double(pairs->top_k) * (row_bytes + 4)
               : branch.values  ? double(rows) * row_bytes
                                : 0;
  const ::vt::trace::LaunchCost cost{"cuda",
                                       {rows, n, 0, 0},
                                       double(rows) * row_bytes * (branch.empty() ? 2 : 3) + branch_bytes +
                                           double(n) * 4 + (q ? double(rows) * double(n) * (1 + 4.0 / 128) : 0),
                                       0,
                                       ::vt::trace::OpGroup::kNorm};
  if (vector) {
    const int threads = int(std::min<int64_t>(kThreads, (n / 8 + 31) / 32 * 32));
    if (pairs) {
      const auto run = [&](auto chunks) {
        constexpr int kChunks = decltype(chunks)::value;
        VT_DISPATCH_ACT(act, T,
                        launch("sm90_add_rms_norm_moe", cost, sm90_add_rms_norm_moe<T, kChunks>, dim3(unsigned(rows)),
                               dim3(threads), 0, stream, static_cast<T*>(out), static_cast<T*>(residual), *pairs, w, q,
                               q_scales, n, eps, weight_offset));
      };
      if (n / 8 <= kPartialThreads) run(std::integral_constant<int, 1>{});
      else run(std::integral_constant<int, kMaxChunks>{});
      return;
    }
    if (!partials) {
      VT_DISPATCH_ACT(act, T,
                      launch("sm90_add_rms_norm_quant", cost, sm90_add_rms_norm_quant<T>, dim3(unsigned(rows)),
                             dim3(threads), 0, stream, static_cast<T*>(out), static_cast<T*>(residual),
                             static_cast<const T*>(branch.values), w, q, q_scales, n, eps, weight_offset));
      return;
    }
    const auto run = [&](auto chunks) {
      constexpr int kChunks = decltype(chunks)::value;
      VT_DISPATCH_ACT(act, T,
                      launch("sm90_add_rms_norm_partials", cost, sm90_add_rms_norm_partials<T, kChunks>,
                             dim3(unsigned(rows)), dim3(threads), 0, stream, static_cast<T*>(out),
                             static_cast<T*>(residual), *partials, w, q, q_scales, n, eps, weight_offset));
    };
    if (n / 8 <= kPartialThreads) run(std::integral_constant<int, 1>{});
    else run(std::integral_constant<int, kMaxChunks>{});
    return;
  }
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_add_rms_norm", cost, sm90_add_rms_norm<T>, dim3(unsigned(rows)), dim3(kThreads), 0, stream,
                         static_cast<T*>(out), static_cast<T*>(residual), static_cast<const T*>(branch.values), w, n,
                         eps, weight_offset));
}

void rms_norm_f32(float* out, const float* x, const float* w, int64_t rows, int64_t n, float eps,
                  float weight_offset, cudaStream_t stream) {
  add_rms_norm(out, const_cast<float*>(x), nullptr, w, rows, n, eps, weight_offset, DType::kF32, stream);
}

}  // namespace vt::cuda
