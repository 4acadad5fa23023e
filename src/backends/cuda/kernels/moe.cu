// MoE kernels: softmax router with top-k, expert GEMVs that read each (token, expert) pair's
// expert weights straight from the stacked expert tensors (no host sync, graph-capturable), and
// the weighted combine with the sigmoid-gated shared expert. Sums run in a fixed order.
#include <cuda_fp8.h>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/kernels/common.cuh"

namespace vt::cuda {
namespace {

constexpr int kRouteThreads = 256;
constexpr int kMaxTopK = 16;
constexpr int kMaxExperts = 1024;
constexpr int kGemvWarps = 8;
constexpr int kGroup = 128;

// Block per token: softmax over the experts in fp32, then k rounds of a block argmax (ties to
// the lower expert id, as the CPU reference), then optional renormalisation of the k weights.
template <typename T>
__global__ void sm90_moe_route(int32_t* __restrict__ g_ids, float* __restrict__ g_weights, const T* __restrict__ g_logits,
                               int64_t experts, int64_t top_k, bool renormalize) {
  __shared__ float s_prob[kMaxExperts];
  __shared__ float s_value[kRouteThreads];
  __shared__ int32_t s_index[kRouteThreads];
  __shared__ float s_scratch[kRouteThreads / 32];
  const T* logits = g_logits + blockIdx.x * experts;
  float local_max = -INFINITY;
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) local_max = fmaxf(local_max, device::to_float(logits[e]));
  s_value[threadIdx.x] = local_max;
  __syncthreads();
  for (int stride = kRouteThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) s_value[threadIdx.x] = fmaxf(s_value[threadIdx.x], s_value[threadIdx.x + stride]);
    __syncthreads();
  }
  const float max_logit = s_value[0];
  float local_sum = 0.0f;
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
    s_prob[e] = expf(device::to_float(logits[e]) - max_logit);
    local_sum += s_prob[e];
  }
  const float total = device::block_sum(local_sum, s_scratch);
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) s_prob[e] /= total;
  __syncthreads();
  float selected_sum = 0.0f;
  float r_weight[kMaxTopK];
  int32_t r_id[kMaxTopK];
  for (int64_t j = 0; j < top_k; ++j) {
    float best = -1.0f;
    int32_t best_id = 0x7fffffff;
    for (int64_t e = threadIdx.x; e < experts; e += blockDim.x)
      if (s_prob[e] > best) best = s_prob[e], best_id = int32_t(e);  // ascending e keeps the lowest id
    s_value[threadIdx.x] = best;
    s_index[threadIdx.x] = best_id;
    __syncthreads();
    for (int stride = kRouteThreads / 2; stride > 0; stride /= 2) {
      if (threadIdx.x < stride) {
        const float other = s_value[threadIdx.x + stride];
        const int32_t other_id = s_index[threadIdx.x + stride];
        if (other > s_value[threadIdx.x] || (other == s_value[threadIdx.x] && other_id < s_index[threadIdx.x])) {
          s_value[threadIdx.x] = other;
          s_index[threadIdx.x] = other_id;
        }
      }
      __syncthreads();
    }
    r_weight[j] = s_value[0];
    r_id[j] = s_index[0];
    selected_sum += r_weight[j];
    __syncthreads();
    if (threadIdx.x == 0) s_prob[r_id[j]] = -2.0f;  // taken
    __syncthreads();
  }
  if (threadIdx.x == 0)
    for (int64_t j = 0; j < top_k; ++j) {
      g_ids[blockIdx.x * top_k + j] = r_id[j];
      g_weights[blockIdx.x * top_k + j] = renormalize ? r_weight[j] / selected_sum : r_weight[j];
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
  VT_DISPATCH_ACT(act, T,
                  sm90_moe_route<T><<<unsigned(tokens), kRouteThreads, 0, stream>>>(
                      ids, weights, static_cast<const T*>(logits), experts, top_k, renormalize));
  VT_CUDA_CHECK_LAUNCH("sm90_moe_route");
}

void moe_expert_gemv(void* y, const void* x, const float* x_scales, const int32_t* expert_ids, const void* weights,
                     const float* w_scales, int64_t pairs, int64_t n, int64_t k, int64_t input_divisor, bool fp8,
                     DType act, cudaStream_t stream) {
  VT_CHECK(!fp8 || k % 16 == 0, "moe_expert_gemv: FP8 K = ", k, " must be a multiple of 16");
  VT_CHECK(input_divisor >= 1, "moe_expert_gemv: input_divisor");
  if (pairs == 0) return;
  ExpertGemvArgs args{y, x, x_scales, expert_ids, weights, w_scales, pairs, n, k, input_divisor};
  dim3 grid(unsigned((n + kGemvWarps - 1) / kGemvWarps), unsigned(pairs));
  if (fp8) {
    VT_DISPATCH_ACT(act, T, sm90_moe_expert_gemv<T, true><<<grid, kGemvWarps * 32, 0, stream>>>(args));
  } else {
    VT_DISPATCH_ACT(act, T, sm90_moe_expert_gemv<T, false><<<grid, kGemvWarps * 32, 0, stream>>>(args));
  }
  VT_CUDA_CHECK_LAUNCH("sm90_moe_expert_gemv");
}

void moe_combine(void* out, const void* expert_out, const float* weights, const void* shared, const void* shared_gate,
                 int64_t tokens, int64_t hidden, int64_t top_k, DType act, cudaStream_t stream) {
  if (tokens == 0) return;
  VT_DISPATCH_ACT(act, T,
                  sm90_moe_combine<T><<<unsigned(tokens), 256, 0, stream>>>(
                      static_cast<T*>(out), static_cast<const T*>(expert_out), weights, static_cast<const T*>(shared),
                      static_cast<const T*>(shared_gate), hidden, top_k));
  VT_CUDA_CHECK_LAUNCH("sm90_moe_combine");
}

}  // namespace vt::cuda
