// Token sampling on the device (sampling.h: sample_rows), one block of 1024 threads per row:
// greedy argmax, or temperature / top-k / top-p drawn by Gumbel-max with the counter-based RNG of
// ops/device_sampling.h; cpu::sample_rows is the twin. No sort: top-k and top-p find their
// boundary by a radix select over the 32-bit order key of s = logit / temperature (digits of 11,
// 11 and 10 bits, one pass over the row each, histograms in shared memory with integer atomics:
// counts for top-k, fixed-point masses for top-p), then a boundary tied between several ids is
// split by id in one more pass. Deterministic: integer sums, and maxima with ties to the lower id.
//
// Cost per row, in passes over its logits (V x 2 bytes for bf16: 497 KB at V = 248,320, mostly
// from L2 after the first pass): greedy 1, temperature alone 1, top-k 4, top-p 5, top-k + top-p 8
// (sampling::sample_row_passes; + 1 per select whose boundary splits a tie), each pass a
// coalesced read by one SM: at batch 16 with top-k + top-p, 16 SMs read ~4 MB each. No global
// scratch; 17 KB of shared memory per block.
#include <cuda_bf16.h>

#include <cstdint>

#include "ops/sampling/sampling.h"

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"
#include "ops/sampling/block_argmax.cuh"
#include "ops/sampling/device_sampling.h"

namespace vt::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxBins = 1 << 11;  // the widest digit
static_assert(kMaxBins % kThreads == 0 && (1 << 10) % kThreads == 0, "each thread scans whole bins");
constexpr int32_t kNoId = 0x7fffffff;

// A prefix of the row in the host Sampler's order (s highest first, ties by the lower id): the ids
// whose key is above `key`, and those whose key equals it up to `last_id`.
struct Cut {
  uint32_t key;
  int32_t last_id;
};
__device__ __forceinline__ bool in_cut(uint32_t key, int32_t id, const Cut& cut) {
  return key > cut.key || (key == cut.key && id <= cut.last_id);
}
constexpr Cut kWholeRow = {0u, kNoId};

struct SharedState {
  unsigned long long histogram[kMaxBins];
  unsigned long long warp_totals[kWarps];
  float warp_values[kWarps];
  int32_t warp_ids[kWarps];
  int32_t warp_counts[kWarps];
  uint32_t bin;                 // the select's crossing bin
  unsigned long long bin_above; // weight of the bins above it
  int32_t found_id;
};

// Elements 4g .. 4g+3 of a row as f32 (past the end: -inf, never read by callers).
template <typename T>
__device__ __forceinline__ void load4(const T* row, int64_t group, int64_t vocab, bool vector4, float* r_x) {
  const int64_t first = group * 4;
  if (vector4) {  // vocab % 4 == 0 and aligned rows: one 16-byte (f32) or 8-byte (bf16) load
    if constexpr (sizeof(T) == 4) {
      const float4 v = *reinterpret_cast<const float4*>(row + first);
      r_x[0] = v.x, r_x[1] = v.y, r_x[2] = v.z, r_x[3] = v.w;
    } else {
      const uint2 packed = *reinterpret_cast<const uint2*>(row + first);
      const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&packed);
      const float2 a = __bfloat1622float2(pairs[0]), b = __bfloat1622float2(pairs[1]);
      r_x[0] = a.x, r_x[1] = a.y, r_x[2] = b.x, r_x[3] = b.y;
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) r_x[j] = first + j < vocab ? device::to_float(row[first + j]) : -INFINITY;
}

// body(group, r_x, count) for each group of 4 elements this thread owns (groups tid, tid + 1024, ...,
// so a thread sees its ids in ascending order); count < 4 only for the row's last group.
template <typename T, typename Body>
__device__ __forceinline__ void for_each_group(const T* row, int64_t vocab, bool vector4, Body&& body) {
  const int64_t groups = (vocab + 3) / 4;
  for (int64_t group = threadIdx.x; group < groups; group += kThreads) {
    float r_x[4];
    load4(row, group, vocab, vector4, r_x);
    body(group, r_x, int(vocab - group * 4 < 4 ? vocab - group * 4 : 4));
  }
}

// Exclusive prefix sum over the threads in order; *total gets the block's sum.
__device__ unsigned long long block_exclusive_scan(unsigned long long value, unsigned long long* total,
                                                   SharedState& s) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned long long inclusive = value;
  for (int offset = 1; offset < 32; offset *= 2) {
    const unsigned long long other = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  __syncthreads();
  if (lane == 31) s.warp_totals[warp] = inclusive;
  __syncthreads();
  unsigned long long before = 0, sum = 0;
  for (int w = 0; w < kWarps; ++w) {
    const unsigned long long warp_total = s.warp_totals[w];
    if (w < warp) before += warp_total;
    sum += warp_total;
  }
  *total = sum;
  return before + inclusive - value;
}

// The id of the nth (1-based) element of `eligible` whose key is `key`, in ascending id order.
template <typename T>
__device__ int32_t nth_tie(const T* row, int64_t vocab, float temperature, uint32_t key, const Cut& eligible,
                           unsigned long long nth, SharedState& s) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned long long seen = 0;
  for (int64_t base = 0; base < vocab; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    bool tie = false;
    if (i < vocab) {
      const uint32_t element_key = sampling::order_key(sampling::scaled_logit(device::to_float(row[i]), temperature));
      tie = element_key == key && in_cut(element_key, int32_t(i), eligible);
    }
    const int count = __syncthreads_count(tie);
    if (seen + unsigned(count) >= nth) {  // the same for every thread
      const unsigned ballot = __ballot_sync(0xffffffffu, tie);
      if (lane == 0) s.warp_counts[warp] = __popc(ballot);
      __syncthreads();
      int rank = __popc(ballot & ((1u << lane) - 1u));
      for (int w = 0; w < warp; ++w) rank += s.warp_counts[w];
      if (tie && seen + unsigned(rank) + 1 == nth) s.found_id = int32_t(i);
      __syncthreads();
      return s.found_id;
    }
    seen += unsigned(count);
  }
  return kNoId;  // not reached: the select counted at least nth such elements
}

// The shortest prefix of `eligible` (in the Sampler's order) whose weight reaches the target:
// kMass: weights fixed_mass(s, max_s) and target mass_target(top_p, their total) (the nucleus);
// else weights 1 and target count_target (top-k). Three histogram passes fix the boundary key
// digit by digit; a boundary key several ids share is split by id (nth_tie).
template <bool kMass, typename T>
__device__ Cut radix_select(const T* row, int64_t vocab, bool vector4, float temperature, const Cut& eligible,
                            float max_s, unsigned long long count_target, float top_p, SharedState& s) {
  uint32_t prefix = 0, prefix_mask = 0;
  unsigned long long target = count_target, above = 0, tied = 0;
  int shift = 32;
  for (int pass = 0; pass < 3; ++pass) {
    const int bits = pass < 2 ? 11 : 10, bins = 1 << bits;
    const uint32_t digit_mask = uint32_t(bins - 1);
    shift -= bits;
    for (int b = threadIdx.x; b < bins; b += kThreads) s.histogram[b] = 0;
    __syncthreads();
    for_each_group(row, vocab, vector4, [&](int64_t group, const float* r_x, int count) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (j >= count) continue;
        const float value = sampling::scaled_logit(r_x[j], temperature);
        const uint32_t key = sampling::order_key(value);
        if ((key & prefix_mask) != prefix || !in_cut(key, int32_t(group * 4 + j), eligible)) continue;
        const unsigned long long weight = kMass ? sampling::fixed_mass(value, max_s) : 1ull;
        if (weight) atomicAdd(&s.histogram[(key >> shift) & digit_mask], weight);
      }
    });
    __syncthreads();
    // Thread t holds bins (bins - 1 - t * per_thread - k): the scan runs from the highest bin down.
    const int per_thread = bins / kThreads;
    unsigned long long local = 0;
    for (int k = 0; k < per_thread; ++k) local += s.histogram[bins - 1 - (int(threadIdx.x) * per_thread + k)];
    unsigned long long total;
    const unsigned long long before = block_exclusive_scan(local, &total, s);
    if (kMass && pass == 0) target = sampling::mass_target(top_p, total);
    const unsigned long long need = target - above;  // > 0: what the bins of this pass must supply
    if (before < need && before + local >= need) {  // exactly one thread: the crossing is in its bins
      unsigned long long reached = before;
      for (int k = 0; k < per_thread; ++k) {
        const int bin = bins - 1 - (int(threadIdx.x) * per_thread + k);
        const unsigned long long weight = s.histogram[bin];
        if (reached + weight >= need) {
          s.bin = uint32_t(bin);
          s.bin_above = reached;
          break;
        }
        reached += weight;
      }
    }
    __syncthreads();
    const uint32_t bin = s.bin;
    above += s.bin_above;
    tied = s.histogram[bin];
    prefix |= bin << shift;
    prefix_mask |= digit_mask << shift;
    __syncthreads();  // everyone has read s.bin and the histogram before the next pass clears it
  }
  // prefix is the boundary key; `tied` the weight of the eligible elements with it, each the same
  // (> 0: the crossing bin has weight), and the prefix takes the fewest of them, by id, that reach.
  // All of them: the ids `eligible` takes at that key (every id when eligible's boundary is lower).
  const unsigned long long unit = kMass ? sampling::fixed_mass(sampling::key_value(prefix), max_s) : 1ull;
  const unsigned long long needed = (target - above + unit - 1) / unit, ties = tied / unit;
  if (needed >= ties) return Cut{prefix, prefix == eligible.key ? eligible.last_id : kNoId};
  return Cut{prefix, nth_tie(row, vocab, temperature, prefix, eligible, needed, s)};
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    sm90_sample_rows(int32_t* __restrict__ g_tokens, const T* __restrict__ g_logits, int64_t vocab,
                     const SampleRowParams* __restrict__ g_params, bool vector4) {
  __shared__ SharedState s;
  device::pdl_enter();  // the logits and the params come from earlier work in the stream
  const SampleRowParams params = g_params[blockIdx.x];
  const T* row = g_logits + int64_t(params.row) * vocab;
  float best = -INFINITY;
  int32_t best_id = kNoId;
  if (sampling::greedy(params)) {
    // The first maximum of the raw logits (as argmax_rows and the host argmax).
    for_each_group(row, vocab, vector4, [&](int64_t group, const float* r_x, int count) {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (j < count && r_x[j] > best) best = r_x[j], best_id = int32_t(group * 4 + j);
    });
  } else {
    Cut cut = kWholeRow;
    if (params.top_k > 0 && params.top_k < vocab)
      cut = radix_select<false>(row, vocab, vector4, params.temperature, cut, 0.0f,
                                (unsigned long long)params.top_k, 1.0f, s);
    if (params.top_p < 1.0f) {
      float max_s = -INFINITY;
      for_each_group(row, vocab, vector4, [&](int64_t, const float* r_x, int count) {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (j < count) max_s = fmaxf(max_s, sampling::scaled_logit(r_x[j], params.temperature));
      });
      max_s = device::block_max(max_s, s.warp_values);
      cut = radix_select<true>(row, vocab, vector4, params.temperature, cut, max_s, 0ull, params.top_p, s);
    }
    // Gumbel-max over the candidates: four random words per group of four ids.
    for_each_group(row, vocab, vector4, [&](int64_t group, const float* r_x, int count) {
      float r_s[4];
      bool r_in[4], any = false;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        r_s[j] = sampling::scaled_logit(r_x[j], params.temperature);
        r_in[j] = j < count && in_cut(sampling::order_key(r_s[j]), int32_t(group * 4 + j), cut);
        any = any || r_in[j];
      }
      if (!any) return;
      const sampling::Words words = sampling::element_words(params.seed, params.counter, uint64_t(group));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (!r_in[j]) continue;
        const float score = sampling::perturbed(r_s[j], words.w[j]);
        if (score > best) best = score, best_id = int32_t(group * 4 + j);
      }
    });
  }
  const int32_t token = device::block_argmax<kWarps>(best, best_id, s.warp_values, s.warp_ids);
  if (threadIdx.x == 0) g_tokens[blockIdx.x] = token == kNoId ? 0 : token;
}

}  // namespace

void sample_rows(int32_t* tokens, const void* logits, int64_t vocab, DType act, const SampleRowParams* params,
                 int64_t count, cudaStream_t stream, double bytes) {
  VT_CHECK(vocab > 0 && vocab <= sampling::kMaxVocab, "sample_rows: vocab ", vocab, " outside [1, ",
           sampling::kMaxVocab, "]");
  VT_CHECK(count >= 0 && count <= 0x7fffffff, "sample_rows: ", count, " rows");
  if (count == 0) return;
  const bool vector4 = vocab % 4 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  const ::vt::trace::LaunchCost cost{
      "cuda", {count, vocab, 0, 0}, bytes > 0 ? bytes : double(count) * double(vocab) * double(dtype_size(act)), 0,
      ::vt::trace::OpGroup::kSampling};
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_sample_rows", cost, sm90_sample_rows<T>, dim3(unsigned(count)), dim3(kThreads), 0,
                         stream, tokens, static_cast<const T*>(logits), vocab, params, vector4));
}

}  // namespace vt::cuda
