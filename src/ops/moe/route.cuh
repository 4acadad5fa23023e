// The routing device code shared by the router kernels (moe_route.cu) and the expert GEMV that
// routes its step itself (moe.cu): one token's softmax and top-k by one warp, and the grouped
// layout of a step whose pairs fit one warp.
#pragma once

#include <climits>
#include <cstdint>
#include <type_traits>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "ops/moe/moe.h"

namespace vt::cuda {

constexpr int kMaxTopK = 16;
constexpr int kMaxExperts = 1024;

// moe_route's arguments checked (whoever routes: the router kernels or the GEMV that routes
// itself); returns the logits' row stride (logits_stride, or 0: one row of experts + shared).
inline int64_t checked_route_stride(int64_t tokens, int64_t experts, int64_t top_k, bool shared,
                                    int64_t logits_stride) {
  const int64_t grouped = experts + shared;
  const int64_t stride = logits_stride > 0 ? logits_stride : grouped;
  VT_CHECK(stride >= grouped, "moe_route: logits rows of ", stride, " for ", grouped, " experts");
  VT_CHECK(
      experts > 0 && grouped <= kMaxExperts && top_k > 0 && top_k <= kMaxTopK && top_k <= experts,
      "moe_route: ", experts, " experts", shared ? " and the shared one" : "", ", top ", top_k,
      " (at most ", kMaxExperts, " experts grouped, top ", kMaxTopK, ")");
  VT_CHECK(tokens * (top_k + shared) < (int64_t(1) << 31), "moe_route: ", tokens, " tokens x ",
           top_k + shared, " pairs");
  return stride;
}

// Calls f(std::integral_constant<int, kPerLane>) with route_token's experts a lane for `experts`.
template <typename F>
void with_experts_per_lane(int64_t experts, F&& f) {
  if (experts <= 128)
    f(std::integral_constant<int, 4>{});
  else if (experts <= 256)
    f(std::integral_constant<int, 8>{});
  else if (experts <= 512)
    f(std::integral_constant<int, 16>{});
  else
    f(std::integral_constant<int, 32>{});
}

// Float <-> uint32 keys in the floats' order (NaN above +inf), for the warp's integer reductions.
__device__ __forceinline__ uint32_t order_key(float value) {
  const uint32_t bits = __float_as_uint(value);
  return bits & 0x80000000u ? ~bits : bits | 0x80000000u;
}
__device__ __forceinline__ float from_order_key(uint32_t key) {
  return __uint_as_float(key & 0x80000000u ? key & 0x7fffffffu : ~key);
}

// One token's routing by one warp. Lane l holds experts l, l + 32, ... (kPerLane of them) in
// registers: softmax by warp reductions, then top_k rounds of warp argmax over (probability, id)
// with ties to the lower id, the CPU reference's order. The renormalising sum runs in choice
// order on every lane, as the CPU's does. shared: g_logits[experts] is the shared expert's gate
// logit; the token's pair top_k is expert `experts` with weight sigmoid of it (expf, as the CPU's
// std::exp), outside the softmax, the top-k and the renormalisation. Returns the expert of the
// lane's pair (lanes below top_k + shared; INT_MAX on the others).
template <typename T, int kPerLane>
__device__ __forceinline__ int route_token(int32_t* g_ids, float* g_weights,
                                           const T* __restrict__ g_logits, int experts, int top_k,
                                           bool renormalize, bool shared) {
  const int lane = threadIdx.x % 32;
  float r_prob[kPerLane];
  float local_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    r_prob[i] = e < experts ? device::to_float(g_logits[e]) : -INFINITY;
    local_max = fmaxf(local_max, r_prob[i]);
  }
  const float max_logit = device::warp_max(local_max);
  float local_sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    r_prob[i] = lane + 32 * i < experts ? expf(r_prob[i] - max_logit) : 0.0f;
    local_sum += r_prob[i];
  }
  const float total = device::warp_sum(local_sum);
  // Probabilities are >= 0; -1 marks a missing expert (never picked: top_k <= experts), -inf a
  // picked one.
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    r_prob[i] = lane + 32 * i < experts ? r_prob[i] / total : -1.0f;
  float selected_sum = 0.0f, my_weight = 0.0f;
  int my_id = 0;
  for (int j = 0; j < top_k; ++j) {
    // The lane's best: strict '>' keeps the lowest i (the lowest id) among equals.
    float best = r_prob[0];
    int best_i = 0;
#pragma unroll
    for (int i = 1; i < kPerLane; ++i)
      if (r_prob[i] > best) best = r_prob[i], best_i = i;
    // The warp's largest probability, then the lowest id holding it: two single-instruction warp
    // reductions (redux.sync) where a butterfly of (probability, id) took five dependent shuffle
    // rounds, eight times a token (docs/perf/2026-12-08-moe-batch1.md).
    const uint32_t key = order_key(best), top = __reduce_max_sync(0xffffffffu, key);
    const int best_id =
        int(__reduce_min_sync(0xffffffffu, key == top ? uint32_t(lane + 32 * best_i) : 0xffffffffu));
    best = from_order_key(top);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + 32 * i == best_id) r_prob[i] = -INFINITY;
    if (lane == j) my_id = best_id, my_weight = best;
    selected_sum += best;
  }
  if (lane < top_k) {
    g_ids[lane] = my_id;
    g_weights[lane] = renormalize ? my_weight / selected_sum : my_weight;
    return my_id;
  }
  if (shared && lane == top_k) {
    g_ids[lane] = experts;
    g_weights[lane] = 1.0f / (1.0f + expf(-device::to_float(g_logits[experts])));
    return experts;
  }
  return INT_MAX;
}

// A step whose pairs fit one warp (tokens x (top_k + shared) <= 32), routed and grouped by one
// warp: route_token per token (ids and weights into routing), each pair's expert kept in its lane,
// then the layout with shuffles, __match_any and ballots, no barrier or scan. The same layout as
// moe_route's block kernels: offsets, pairs in pair order within an expert, the active experts
// ascending. routing.expert_offsets may be null (not written); slot_pairs (when not null) gets
// active slot s's pairs as sorted_pairs[slot_pairs[2s] .. slot_pairs[2s + 1]).
template <typename T, int kPerLane>
__device__ __forceinline__ void warp_route(const MoeRouting& routing, int32_t* slot_pairs,
                                           const T* __restrict__ g_logits, int tokens, int experts,
                                           int top_k, bool renormalize, bool shared, int stride) {
  const int lane = threadIdx.x % 32, slots = top_k + shared, pairs = tokens * slots;
  const int grouped = experts + shared;
  int pair_expert = INT_MAX;  // this lane's pair's expert; INT_MAX past the pairs
  for (int token = 0; token < tokens; ++token) {
    const int expert = route_token<T, kPerLane>(
        routing.ids + token * slots, routing.weights + token * slots,
        g_logits + int64_t(token) * stride, experts, top_k, renormalize, shared);
    const int from = lane - token * slots;  // the lane that routed this lane's pair
    const int got = __shfl_sync(0xffffffffu, expert, from >= 0 && from < 32 ? from : 0);
    if (from >= 0 && from < slots) pair_expert = got;
  }
  int all[32];  // every pair's expert
#pragma unroll
  for (int r = 0; r < 32; ++r) all[r] = __shfl_sync(0xffffffffu, pair_expert, r);
  const bool valid = lane < pairs;
  const unsigned same = __match_any_sync(0xffffffffu, pair_expert);
  const unsigned leaders = __ballot_sync(0xffffffffu, valid && lane == __ffs(same) - 1);
  int below = 0, distinct_below = 0;  // pairs of lower experts; lower experts with a pair
#pragma unroll
  for (int r = 0; r < 32; ++r) {
    below += all[r] < pair_expert;
    distinct_below += ((leaders >> r) & 1u) && all[r] < pair_expert;
  }
  if (valid) {
    const int rank = __popc(same & ((1u << lane) - 1u));  // earlier pairs of the same expert
    routing.sorted_pairs[below + rank] = lane;
    if (rank == 0) {
      routing.active_experts[distinct_below] = pair_expert;
      if (slot_pairs) {
        slot_pairs[2 * distinct_below] = below;
        slot_pairs[2 * distinct_below + 1] = below + __popc(same);
      }
    }
  }
  if (lane == 0) *routing.active_count = __popc(leaders);
  if (!routing.expert_offsets) return;
  for (int e = lane; e <= grouped; e += 32) {
    int count = 0;
#pragma unroll
    for (int r = 0; r < 32; ++r) count += all[r] < e;
    routing.expert_offsets[e] = count;
  }
}

}  // namespace vt::cuda
