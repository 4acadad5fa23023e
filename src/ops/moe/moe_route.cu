// MoE routing on the device: softmax and top-k one warp per token (plus, when the shared expert is
// stacked as expert E, its sigmoid-gated pair), then the expert-grouped layout (per-expert offsets,
// pair indices sorted by expert, the active experts) that lets the expert GEMV read each routed
// expert once. No host sync: graph-capturable, T known on the host only.
#include "ops/moe/moe.h"

#include <algorithm>
#include <climits>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"
#include "ops/moe/route.cuh"

namespace vt::cuda {
namespace {

// Steps of up to kFusedMaxTokens tokens route and group in one block (16 warps, at most 4 tokens
// a warp): one launch per layer at decode. Longer ones route with a block per 8 tokens and group
// in a second single-block kernel.
constexpr int kFusedThreads = 512;
constexpr int kFusedMaxTokens = 64;
constexpr int kRouteThreads = 256;
constexpr int kGroupThreads = 1024;
// Pair ids staged in shared memory per round of the (one-warp, ordered) placement.
constexpr int kPlaceTile = 2048;

// Exclusive prefix sum over the block of one value per thread (blockDim.x a multiple of 32, at
// most 1024); *total gets the sum. s_warp holds 32 values.
__device__ __forceinline__ long long block_exclusive_scan(long long value, long long* s_warp,
                                                          long long* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  long long inclusive = value;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const long long other = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == 31) s_warp[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    long long warp_total = lane < warps ? s_warp[lane] : 0;
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const long long other = __shfl_up_sync(0xffffffffu, warp_total, offset);
      if (lane >= offset) warp_total += other;
    }
    s_warp[lane] = warp_total;  // inclusive over warps
  }
  __syncthreads();
  *total = s_warp[warps - 1];
  const long long result = (warp > 0 ? s_warp[warp - 1] : 0) + inclusive - value;
  __syncthreads();  // s_warp may be reused by the caller
  return result;
}

// The grouped layout of g_ids [pairs] by the whole block: counts by shared atomics (order-free),
// one scan for the offsets and the active list, then warp 0 places the pairs in pair order (its
// per-expert cursors make the order within an expert ascending, whatever the atomics did). The
// ids are read through L2 (__ldcg): the fused kernel wrote them a barrier ago.
__device__ void group_pairs(const int32_t* g_ids, int32_t* g_offsets, int32_t* g_sorted,
                            int32_t* g_active, int32_t* g_active_count, int pairs, int experts) {
  __shared__ int s_count[kMaxExperts];
  __shared__ long long s_warp[32];
  __shared__ int s_ids[kPlaceTile];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) s_count[e] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) atomicAdd(&s_count[__ldcg(g_ids + p)], 1);
  __syncthreads();
  // Thread i owns experts [i * per, (i + 1) * per): their pair count and active count, packed.
  const int per = (experts + blockDim.x - 1) / blockDim.x;
  const int first = threadIdx.x * per, last = min(first + per, experts);
  long long local = 0;
  for (int e = first; e < last; ++e)
    local += (static_cast<long long>(s_count[e]) << 32) + (s_count[e] > 0);
  long long total = 0;
  const long long prefix = block_exclusive_scan(local, s_warp, &total);
  int offset = int(prefix >> 32), active = int(prefix & 0xffffffffll);
  for (int e = first; e < last; ++e) {
    const int count = s_count[e];
    g_offsets[e] = offset;
    if (count > 0) g_active[active++] = e;
    s_count[e] = offset;  // now the expert's placement cursor
    offset += count;
  }
  if (threadIdx.x == 0) {
    g_offsets[experts] = int(total >> 32);
    *g_active_count = int(total & 0xffffffffll);
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  for (int tile = 0; tile < pairs; tile += kPlaceTile) {
    const int size = min(kPlaceTile, pairs - tile);
    for (int i = threadIdx.x; i < size; i += blockDim.x) s_ids[i] = __ldcg(g_ids + tile + i);
    __syncthreads();
    if (threadIdx.x < 32) {
      for (int base = 0; base < size; base += 32) {
        const int i = base + lane;
        const int expert = i < size ? s_ids[i] : -1;
        // Lanes of one expert: their rank below this lane, and the lowest of them advances the
        // cursor.
        const unsigned same = __match_any_sync(0xffffffffu, expert);
        const int rank = __popc(same & ((1u << lane) - 1));
        if (expert >= 0) g_sorted[s_count[expert] + rank] = tile + i;
        __syncwarp();
        if (expert >= 0 && rank == 0) s_count[expert] += __popc(same);
        __syncwarp();
      }
    }
    __syncthreads();
  }
}

// Grid (ceil(T / 8)), 8 warps: warp w routes token 8 * block + w. A token's logits row and pairs
// are experts + shared and top_k + shared wide.
template <typename T, int kPerLane>
__global__ void __launch_bounds__(kRouteThreads)
    sm90_moe_route(MoeRouting routing, const T* __restrict__ g_logits, int tokens, int experts,
                   int top_k, bool renormalize, bool shared, int stride) {
  device::pdl_enter();
  const int token = blockIdx.x * (kRouteThreads / 32) + threadIdx.x / 32;
  if (token >= tokens) return;
  const int slots = top_k + shared;
  route_token<T, kPerLane>(routing.ids + token * slots, routing.weights + token * slots,
                           g_logits + int64_t(token) * stride, experts, top_k, renormalize, shared);
}

// One block: routes every token (warp w takes tokens w, w + 16, ...), then groups them.
template <typename T, int kPerLane>
__global__ void __launch_bounds__(kFusedThreads)
    sm90_moe_route_group(MoeRouting routing, const T* __restrict__ g_logits, int tokens,
                         int experts, int top_k, bool renormalize, bool shared, int stride) {
  device::pdl_enter();
  const int slots = top_k + shared;
  for (int token = threadIdx.x / 32; token < tokens; token += kFusedThreads / 32)
    route_token<T, kPerLane>(routing.ids + token * slots, routing.weights + token * slots,
                             g_logits + int64_t(token) * stride, experts, top_k, renormalize,
                             shared);
  __syncthreads();  // the ids, written to global memory above, are visible to the whole block
  group_pairs(routing.ids, routing.expert_offsets, routing.sorted_pairs, routing.active_experts,
              routing.active_count, tokens * slots, experts + shared);
}

// Steps whose pairs fit one warp (tokens x (top_k + shared) <= 32: decode at batch 1..3): one
// warp routes and groups them (route.cuh's warp_route; the one-block kernel's barrier and scan took
// ~5 us of a batch-1 step, once per MoE layer).
template <typename T, int kPerLane>
__global__ void __launch_bounds__(32)
    sm90_moe_warp_route(MoeRouting routing, const T* __restrict__ g_logits, int tokens, int experts,
                        int top_k, bool renormalize, bool shared, int stride) {
  device::pdl_enter();
  warp_route<T, kPerLane>(routing, nullptr, g_logits, tokens, experts, top_k, renormalize, shared,
                          stride);
}

__global__ void __launch_bounds__(kGroupThreads)
    sm90_moe_group(MoeRouting routing, int pairs, int experts) {
  device::pdl_enter();
  group_pairs(routing.ids, routing.expert_offsets, routing.sorted_pairs, routing.active_experts,
              routing.active_count, pairs, experts);
}

template <typename T, int kPerLane>
void launch_route(const MoeRouting& routing, const T* logits, int64_t tokens, int64_t experts,
                  int64_t top_k, bool renormalize, bool shared, int64_t stride,
                  cudaStream_t stream) {
  // The grouped layout's experts and pairs: the shared expert is one more of each.
  const int64_t grouped = experts + shared, pairs = tokens * (top_k + shared);
  // The logits read, each pair's id and weight written, the layout's words written (ids read back).
  const double route_bytes =
      double(tokens) * double(grouped) * double(sizeof(T)) + double(pairs) * 8;
  const double group_bytes =
      double(pairs) * 12 + double(grouped + 1) * 4 + double(std::min(pairs, grouped) + 1) * 4;
  if (pairs <= 32) {
    const ::vt::trace::LaunchCost cost{"cuda",
                                       {tokens, experts, top_k, 0},
                                       route_bytes + group_bytes,
                                       0,
                                       ::vt::trace::OpGroup::kMoe};
    launch("sm90_moe_warp_route", cost, sm90_moe_warp_route<T, kPerLane>, dim3(1), dim3(32), 0,
           stream, routing, logits, int(tokens), int(experts), int(top_k), renormalize, shared,
           int(stride));
    return;
  }
  if (tokens <= kFusedMaxTokens) {
    const ::vt::trace::LaunchCost cost{"cuda",
                                       {tokens, experts, top_k, 0},
                                       route_bytes + group_bytes,
                                       0,
                                       ::vt::trace::OpGroup::kMoe};
    launch("sm90_moe_route_group", cost, sm90_moe_route_group<T, kPerLane>, dim3(1),
           dim3(kFusedThreads), 0, stream, routing, logits, int(tokens), int(experts), int(top_k),
           renormalize, shared, int(stride));
    return;
  }
  const ::vt::trace::LaunchCost route_cost{
      "cuda", {tokens, experts, top_k, 0}, route_bytes, 0, ::vt::trace::OpGroup::kMoe};
  const int64_t warps = kRouteThreads / 32;
  launch("sm90_moe_route", route_cost, sm90_moe_route<T, kPerLane>,
         dim3(unsigned((tokens + warps - 1) / warps)), dim3(kRouteThreads), 0, stream, routing,
         logits, int(tokens), int(experts), int(top_k), renormalize, shared, int(stride));
  const ::vt::trace::LaunchCost group_cost{
      "cuda", {tokens, experts, top_k, 0}, group_bytes, 0, ::vt::trace::OpGroup::kMoe};
  launch("sm90_moe_group", group_cost, sm90_moe_group, dim3(1), dim3(kGroupThreads), 0, stream,
         routing, int(pairs), int(grouped));
}

}  // namespace

void moe_route(const MoeRouting& routing, const void* logits, int64_t tokens, int64_t experts,
               int64_t top_k, bool renormalize, DType act, cudaStream_t stream, bool shared_expert,
               int64_t logits_stride) {
  const int64_t stride = checked_route_stride(tokens, experts, top_k, shared_expert, logits_stride);
  if (tokens == 0) return;
  VT_DISPATCH_ACT(act, T, {
    with_experts_per_lane(experts, [&](auto per_lane) {
      launch_route<T, decltype(per_lane)::value>(routing, static_cast<const T*>(logits), tokens,
                                                 experts, top_k, renormalize, shared_expert, stride,
                                                 stream);
    });
  });
}

}  // namespace vt::cuda
