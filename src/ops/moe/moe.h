// Mixture of experts: the router, the expert-grouped layout, the expert GEMV and the combine, on
// the CPU (the references) and on CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/stream.h"

namespace vt {

// A step's routing. Pair p = t * top_k + j is token t's j-th choice. The grouped layout lists each
// expert's pairs together so that the expert GEMV reads an expert's weights once for all of them.
// With a shared expert stacked as expert E (moe_route's shared_expert), a token has k + 1 pairs
// (the last one expert E's) over E + 1 experts: top_k and experts below are k + 1 and E + 1.
struct MoeRouting {
  int32_t* ids = nullptr;    // [T, k] expert of each pair
  float* weights = nullptr;  // [T, k] its routing weight
  int32_t* expert_offsets =
      nullptr;  // [E + 1] expert e's pairs: sorted_pairs[offsets[e] .. offsets[e + 1])
  int32_t* sorted_pairs =
      nullptr;  // [T * k] pair indices grouped by expert, ascending within an expert
  int32_t* active_experts = nullptr;  // [min(T * k, E)] the experts with a pair, ascending
  int32_t* active_count = nullptr;    // [1] how many there are
};

// The int32 words a routing of up to `tokens` tokens takes (ids, offsets, sorted pairs, active
// experts and their count), and the routing laid out in them (weights: [tokens * top_k] f32).
int64_t moe_routing_words(int64_t tokens, int64_t experts, int64_t top_k);
MoeRouting moe_routing_in(int32_t* words, float* weights, int64_t tokens, int64_t experts,
                          int64_t top_k);

}  // namespace vt

namespace vt::cpu {

// Softmax router: logits [T, E] -> top-k expert ids and weights per token (renormalised if asked).
// shared_expert: logits [T, E + 1], column E the shared expert's gate logit; ids and weights
// [T, k + 1], pair k of each token expert E with weight sigmoid(logit E) (the softmax, top-k and
// renormalisation see the first E columns only).
void moe_route(int32_t* expert_ids, float* weights, const float* logits, int64_t num_tokens,
               int64_t num_experts, int64_t top_k, bool renormalize, bool shared_expert = false);
// The grouped layout of routing.ids (MoeRouting's fields other than ids and weights).
void moe_group(const MoeRouting& routing, int64_t num_tokens, int64_t num_experts, int64_t top_k);
// y [pairs, n] = W[ids[p]] [n, k] . x[p / input_divisor]: f32 weights [E, n, k] and inputs.
void moe_expert_gemv(float* y, const float* x, const int32_t* expert_ids, const float* weights,
                     int64_t pairs, int64_t n, int64_t k, int64_t input_divisor);
// The same with e4m3 weight codes [E, n, k] (scales [E, ceil(n/128), ceil(k/128)]) and input codes
// [rows, k] (scales [rows, ceil(k/128)]): per 128-block of K the dot of the codes (products exact
// in f32, summed in f32) times weight scale x input scale, the blocks summed in order, as the
// kernel's fp32-accumulating MMAs do.
void moe_expert_gemv_fp8(float* y, const uint8_t* x, const float* x_scales,
                         const int32_t* expert_ids, const uint8_t* weights, const float* w_scales,
                         int64_t pairs, int64_t n, int64_t k, int64_t input_divisor);
// out [T, H] = sum_j weights[t, j] expert_out[t*k + j] (j in order) (+ sigmoid(shared_gate[t])
// shared[t] when shared is not null).
void moe_combine(float* out, const float* expert_out, const float* weights, const float* shared,
                 const float* shared_gate, int64_t tokens, int64_t hidden, int64_t top_k);

}  // namespace vt::cpu

namespace vt::cuda {

// ---- MoE ----
// Softmax over logits [T, E] act, top-k per token (ties to the lower id), optionally
// renormalised, into routing.ids / weights, then the grouped layout (all on the device: no host
// sync, graph-capturable). Bit-exact ids with cpu::moe_route up to expf's rounding.
// shared_expert: the shared expert is stacked as expert E and its gate as router row E: logits
// [T, E + 1], and each token gets pair k, expert E with weight sigmoid(logit E), as
// cpu::moe_route's shared_expert; the routing then holds T * (k + 1) pairs over E + 1 experts
// (moe_routing_in(words, weights, T, E + 1, k + 1)), one GEMV launch serving routed and shared.
// logits_stride: elements between tokens' logits rows (0: E, or E + 1 with the shared expert).
void moe_route(const MoeRouting& routing, const void* logits, int64_t tokens, int64_t experts,
               int64_t top_k, bool renormalize, DType act, cudaStream_t stream,
               bool shared_expert = false, int64_t logits_stride = 0);
// The step's router for moe_expert_gemv to route first (moe_route's arguments): logits
// [T, stride] f32, `experts` routed (without the shared one), top_k of them a token.
struct MoeRouter {
  const void* logits = nullptr;
  int64_t experts = 0, top_k = 0;
  bool renormalize = true, shared_expert = false;
  int64_t logits_stride = 0;
};
// y [pairs, n] act (pairs = tokens * top_k, in pair order) = W[e] [n, k] . x[p / input_divisor]
// for every pair p routed to expert e. Grouped by expert: each active expert's weights are read
// once, for all its pairs. Weights stacked [E, n, k] in act dtype, or e4m3 codes (with
// [E, ceil(n/128), ceil(k/128)] scales; x then e4m3 codes [rows, k] with [rows, ceil(k/128)]
// scales, k a multiple of 16). experts_read: how many distinct experts the caller expects the
// launch to read (the routing is on the device), for the profile's bytes; 0: min(pairs, E).
// schedule: the FP8 kernel and its work split (all 0: the built-in choice, the CUDA-core kernel
// at one token and for two tokens' long-K projection, the MMA kernel otherwise); `vt bench op moe`
// times them.
// (Four 128-blocks a step per warp instead of two spilled registers at the MMA kernel's occupancy.)
// routing_ready: the caller's promise that the kernel that wrote the routing had completed when the
// previous kernel on the stream passed its PDL wait (a kernel between them, which triggers only
// after its wait, as all of ours do), so the FP8 CUDA-core kernel reads it, and loads its first
// weights, before waiting on that previous kernel.
// router: route the step into `routing` first, as moe_route does (the same words): inside the
// GEMV's blocks at one token where the built-in choice is the CUDA-core kernel (decode at batch 1:
// one launch a MoE layer fewer), else by moe_route before it.
struct MoeGemvSchedule {
  int splits =
      0;  // MMA kernel: warps of a block splitting K: 1, 2, 4, 8 (the rest take more columns)
  int columns = 0;  // CUDA-core kernel: output rows a warp, 2, 4, 8 (0: not asked for)
};
void moe_expert_gemv(void* y, const void* x, const float* x_scales, const MoeRouting& routing,
                     const void* weights, const float* w_scales, int64_t tokens, int64_t experts,
                     int64_t top_k, int64_t n, int64_t k, int64_t input_divisor, bool fp8,
                     DType act, cudaStream_t stream, double experts_read = 0,
                     MoeGemvSchedule schedule = {}, bool routing_ready = false,
                     const MoeRouter* router = nullptr);
// out [T, H] = sum_j weights[t, j] expert_out[t*k + j] (+ sigmoid(shared_gate[t]) shared[t] when
// shared is not null).
void moe_combine(void* out, const void* expert_out, const float* weights, const void* shared,
                 const void* shared_gate, int64_t tokens, int64_t hidden, int64_t top_k, DType act,
                 cudaStream_t stream);

}  // namespace vt::cuda
