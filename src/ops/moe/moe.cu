// MoE kernels: softmax router with top-k, expert GEMVs that read each (token, expert) pair's
// expert weights straight from the stacked expert tensors (no host sync, graph-capturable), and
// the weighted combine with the sigmoid-gated shared expert. Sums run in a fixed order.
#include <cuda_fp8.h>

#include "ops/moe/moe.h"

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"

namespace vt::cuda {
namespace {

constexpr int kRouteThreads = 256;
constexpr int kMaxTopK = 16;
constexpr int kMaxExperts = 1024;
constexpr int kGemvWarps = 8;
constexpr int kGroup = 128;

// Block per token: softmax over the experts in fp32, then top-k by rank: expert i is the j-th
// choice when j experts come before it in (probability descending, id ascending) order, which is
// what k rounds of argmax with ties to the lower id (the CPU reference) pick, without k rounds of
// block reductions. Then optional renormalisation of the k weights, summed in choice order.
template <typename T>
__global__ void sm90_moe_route(int32_t* __restrict__ g_ids, float* __restrict__ g_weights, const T* __restrict__ g_logits,
                               int64_t experts, int64_t top_k, bool renormalize) {
  __shared__ float s_prob[kMaxExperts];
  __shared__ float s_scratch[kRouteThreads / 32];
  __shared__ int32_t s_id[kMaxTopK];
  __shared__ float s_weight[kMaxTopK];
  device::pdl_enter();
  const T* logits = g_logits + blockIdx.x * experts;
  float local_max = -INFINITY;
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) local_max = fmaxf(local_max, device::to_float(logits[e]));
  const float max_logit = device::block_max(local_max, s_scratch);
  float local_sum = 0.0f;
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
    s_prob[e] = expf(device::to_float(logits[e]) - max_logit);
    local_sum += s_prob[e];
  }
  const float total = device::block_sum(local_sum, s_scratch);
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) s_prob[e] /= total;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < experts; i += blockDim.x) {
    const float p = s_prob[i];
    int64_t rank = 0;
    for (int64_t e = 0; e < experts && rank < top_k; ++e) {
      const float other = s_prob[e];
      rank += other > p || (other == p && e < i);
    }
    if (rank < top_k) {
      s_id[rank] = int32_t(i);
      s_weight[rank] = p;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float selected_sum = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) selected_sum += s_weight[j];
    for (int64_t j = 0; j < top_k; ++j) {
      g_ids[blockIdx.x * top_k + j] = s_id[j];
      g_weights[blockIdx.x * top_k + j] = renormalize ? s_weight[j] / selected_sum : s_weight[j];
    }
  }
}

struct ExpertGemvArgs {
  void* y;                 // [pairs, n] act
  const void* x;           // dense: [rows, k] act; fp8: codes [rows, k]
  const float* x_scales;   // fp8: [rows, ceil(k/128)]
  const int32_t* expert_ids;  // [pairs]
  const void* weights;     // [E, n, k]: act dtype (dense) or e4m3 codes (fp8)
  const float* w_scales;   // fp8: [E, ceil(n/128), ceil(k/128)]
  int64_t pairs, n, k, input_divisor;  // input row of pair p is p / input_divisor
};

// Grid (output-row blocks, pair): one warp per output row of the pair's expert.
template <typename T, bool kFp8>
__global__ void __launch_bounds__(kGemvWarps * 32) sm90_moe_expert_gemv(ExpertGemvArgs args) {
  device::pdl_enter();
  const int64_t row = int64_t(blockIdx.x) * kGemvWarps + threadIdx.x / 32, pair = blockIdx.y;
  if (row >= args.n) return;
  const int lane = threadIdx.x % 32;
  const int64_t expert = args.expert_ids[pair], input = pair / args.input_divisor, k = args.k;
  float sum = 0.0f;
  if constexpr (kFp8) {
    const int64_t k_blocks = (k + kGroup - 1) / kGroup, n_blocks = (args.n + kGroup - 1) / kGroup;
    const uint8_t* w = static_cast<const uint8_t*>(args.weights) + (expert * args.n + row) * k;
    const uint8_t* x = static_cast<const uint8_t*>(args.x) + input * k;
    const float* w_scales = args.w_scales + (expert * n_blocks + row / kGroup) * k_blocks;
    for (int64_t k0 = int64_t(lane) * 16; k0 < k; k0 += 32 * 16) {
      float r_w[16], r_x[16];
      device::fp8x16_to_float(__ldcs(reinterpret_cast<const uint4*>(w + k0)), r_w);
      device::fp8x16_to_float(*reinterpret_cast<const uint4*>(x + k0), r_x);
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < 16; ++e) dot += r_w[e] * r_x[e];
      sum += dot * (w_scales[k0 / kGroup] * args.x_scales[input * k_blocks + k0 / kGroup]);
    }
  } else {
    const T* w = static_cast<const T*>(args.weights) + (expert * args.n + row) * k;
    const T* x = static_cast<const T*>(args.x) + input * k;
    for (int64_t i = lane; i < k; i += 32) sum += device::to_float(w[i]) * device::to_float(x[i]);
  }
  sum = device::warp_sum(sum);
  if (lane == 0) static_cast<T*>(args.y)[pair * args.n + row] = device::from_float<T>(sum);
}

// out [t, :] = sum_j weight[t, j] * expert_out[t*k + j, :] + sigmoid(shared_gate[t]) * shared[t, :]
template <typename T>
__global__ void sm90_moe_combine(T* __restrict__ g_out, const T* __restrict__ g_expert_out, const float* __restrict__ g_weights,
                                 const T* __restrict__ g_shared, const T* __restrict__ g_shared_gate, int64_t hidden,
                                 int64_t top_k) {
  device::pdl_enter();
  const int64_t token = blockIdx.x;
  const float gate = g_shared ? device::sigmoid(device::to_float(g_shared_gate[token])) : 0.0f;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float value = 0.0f;
    for (int64_t j = 0; j < top_k; ++j)
      value += g_weights[token * top_k + j] * device::to_float(g_expert_out[(token * top_k + j) * hidden + i]);
    if (g_shared) value += gate * device::to_float(g_shared[token * hidden + i]);
    g_out[token * hidden + i] = device::from_float<T>(value);
  }
}

}  // namespace

void moe_route(int32_t* ids, float* weights, const void* logits, int64_t tokens, int64_t experts, int64_t top_k,
               bool renormalize, DType act, cudaStream_t stream) {
  VT_CHECK(experts > 0 && experts <= kMaxExperts && top_k > 0 && top_k <= kMaxTopK && top_k <= experts,
           "moe_route: ", experts, " experts, top ", top_k, " (at most ", kMaxExperts, " / ", kMaxTopK, ")");
  if (tokens == 0) return;
  // Reads the logits, writes ids and weights.
  const double bytes = double(tokens) * (double(experts) * double(dtype_size(act)) + double(top_k) * 8.0);
  const ::vt::trace::LaunchCost cost{"cuda", {tokens, experts, top_k, 0}, bytes, 0, ::vt::trace::OpGroup::kMoe};
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_moe_route", cost, sm90_moe_route<T>, dim3(unsigned(tokens)), dim3(kRouteThreads), 0, stream,
                         ids, weights, static_cast<const T*>(logits), experts, top_k, renormalize));
}

void moe_expert_gemv(void* y, const void* x, const float* x_scales, const int32_t* expert_ids, const void* weights,
                     const float* w_scales, int64_t pairs, int64_t n, int64_t k, int64_t input_divisor, bool fp8,
                     DType act, cudaStream_t stream) {
  VT_CHECK(!fp8 || k % 16 == 0, "moe_expert_gemv: FP8 K = ", k, " must be a multiple of 16");
  VT_CHECK(input_divisor >= 1, "moe_expert_gemv: input_divisor");
  if (pairs == 0) return;
  ExpertGemvArgs args{y, x, x_scales, expert_ids, weights, w_scales, pairs, n, k, input_divisor};
  // Each pair reads its expert's [n, k] weights (with their 128x128 scales), its input row (with
  // its 1x128 scales) and writes its output row. A token's top-k experts are distinct, so at one
  // token this is what the launch moves; tokens sharing an expert make it an upper bound.
  const double act_size = double(dtype_size(act)), weight_size = fp8 ? 1.0 : act_size;
  const double scale_bytes = fp8 ? double((n + 127) / 128) * double((k + 127) / 128) * 4.0 : 0.0;
  const double input_bytes = double(k) * weight_size + (fp8 ? double((k + 127) / 128) * 4.0 : 0.0);
  const double bytes = double(pairs) * (double(n) * double(k) * weight_size + scale_bytes + input_bytes + double(n) * act_size);
  const ::vt::trace::LaunchCost cost{fp8 ? "fp8" : "cuda", {pairs, n, k, 0}, bytes,
                                       2.0 * double(pairs) * double(n) * double(k), ::vt::trace::OpGroup::kMoe};
  dim3 grid(unsigned((n + kGemvWarps - 1) / kGemvWarps), unsigned(pairs));
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_moe_expert_gemv", cost, fp8 ? sm90_moe_expert_gemv<T, true> : sm90_moe_expert_gemv<T, false>,
                         grid, dim3(kGemvWarps * 32), 0, stream, args));
}

void moe_combine(void* out, const void* expert_out, const float* weights, const void* shared, const void* shared_gate,
                 int64_t tokens, int64_t hidden, int64_t top_k, DType act, cudaStream_t stream) {
  if (tokens == 0) return;
  // Reads the k expert rows and their weights (and the shared expert's row and gate), writes the row.
  const double act_size = double(dtype_size(act));
  const double shared_bytes = shared ? double(hidden + 1) * act_size : 0.0;
  const double bytes = double(tokens) * (double(top_k) * (double(hidden) * act_size + 4.0) + shared_bytes + double(hidden) * act_size);
  const ::vt::trace::LaunchCost cost{"cuda", {tokens, hidden, top_k, 0}, bytes, 0, ::vt::trace::OpGroup::kMoe};
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_moe_combine", cost, sm90_moe_combine<T>, dim3(unsigned(tokens)), dim3(256), 0, stream,
                         static_cast<T*>(out), static_cast<const T*>(expert_out), weights,
                         static_cast<const T*>(shared), static_cast<const T*>(shared_gate), hidden, top_k));
}

}  // namespace vt::cuda
