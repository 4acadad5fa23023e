// Gated attention kernels: q/k norm + partial RoPE + paged KV write, and causal GQA attention
// over a paged cache with the sigmoid output gate applied in the epilogue: the split-key partials
// (the grouped kernels of attention_grouped.cu where they serve the shape, else a block per query
// head here) merged by the combine kernel.
#include "ops/attention/attention.h"

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"
#include "ops/attention/attention_args.h"
#include "ops/step_layout.h"

namespace vt::cuda {
namespace {

constexpr int kPrepareThreads = 128;
constexpr int kMaxPerLane = 8;  // head_dim <= 256
constexpr int kMaxHeadDim = 32 * kMaxPerLane;

struct PrepareArgs {
  float* q_out;     // null: q in act only
  void* q_act_out;  // null: q in f32 only
  void* gate_out;
  void* k_cache;
  void* v_cache;
  const void* projected;
  const float* q_norm;
  const float* k_norm;
  StepLayout layout;
  AttentionShape shape;
};

// Block (token, head): heads [0, Hq) are query heads, [Hq, Hq + Hkv) key/value heads. The step's
// layout (uploaded before the step, written by no kernel) is read, and the rotation's angles made,
// before the PDL wait: the cache row is three dependent loads, which then overlap the projection
// that this kernel waits for instead of following it.
template <typename T>
__global__ void sm90_attention_prepare(PrepareArgs args) {
  constexpr int kPerThread = kMaxHeadDim / kPrepareThreads;
  __shared__ float s_x[kMaxHeadDim];
  __shared__ float s_scratch[kPrepareThreads / 32];
  const auto& shape = args.shape;
  const int64_t token = blockIdx.x, head = blockIdx.y, d = shape.head_dim;
  const int64_t hq = shape.num_heads, hkv = shape.num_kv_heads;
  const bool is_query = head < hq;
  const int32_t position = args.layout.positions[token];
  const int64_t half = shape.rotary_dim / 2;
  float r_cos[kPerThread], r_sin[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = threadIdx.x + j * kPrepareThreads;
    const float angle = i < shape.rotary_dim
                            ? float(position) * rope_inv_freq(shape.rope, i % half, shape.rotary_dim)
                            : 0.0f;
    r_cos[j] = cosf(angle) * shape.rope.attention_factor, r_sin[j] = sinf(angle) * shape.rope.attention_factor;
  }
  int64_t cache_row = 0;
  if (!is_query) {
    const int32_t seq = args.layout.token_seq[token];
    const int32_t block = args.layout.block_tables[int64_t(args.layout.slots[seq]) * args.layout.max_blocks +
                                                   position / shape.block_size];
    cache_row = (int64_t(block) * shape.block_size + position % shape.block_size) * hkv;
  }
  device::pdl_enter();
  const int64_t width = hq * 2 * d + 2 * hkv * d;
  const T* row = static_cast<const T*>(args.projected) + token * width;
  const T* source = is_query ? row + head * 2 * d : row + hq * 2 * d + (head - hq) * d;
  const float* norm_w = is_query ? args.q_norm : args.k_norm;

  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float value = device::to_float(source[i]);
    s_x[i] = value;
    sum += value * value;
  }
  const float scale = rsqrtf(device::block_sum(sum, s_scratch) / float(d) + shape.eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s_x[i] = s_x[i] * scale * (1.0f + norm_w[i]);
  __syncthreads();

#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int64_t i = threadIdx.x + j * kPrepareThreads;
    if (i >= d) break;
    float value = s_x[i];
    if (i < shape.rotary_dim) {
      const float c = r_cos[j], s = r_sin[j];
      value = i < half ? s_x[i] * c - s_x[i + half] * s : s_x[i] * c + s_x[i - half] * s;
    }
    if (is_query) {
      if (args.q_out) args.q_out[(token * hq + head) * d + i] = value;
      if (args.q_act_out) static_cast<T*>(args.q_act_out)[(token * hq + head) * d + i] = device::from_float<T>(value);
      static_cast<T*>(args.gate_out)[(token * hq + head) * d + i] = row[head * 2 * d + d + i];
    } else {
      const int64_t kv_head = head - hq;
      static_cast<T*>(args.k_cache)[(cache_row + kv_head) * d + i] = device::from_float<T>(value);
      static_cast<T*>(args.v_cache)[(cache_row + kv_head) * d + i] = row[hq * 2 * d + hkv * d + kv_head * d + i];
    }
  }
}

// Block (token, query head, split): the split's keys [split * keys_per_split, ...) up to the
// token's position, warps taking keys in turn with an online softmax each, merged in the block
// and written as one partial (max, sum, acc) for the combine kernel.
template <typename T>
__global__ void __launch_bounds__(kAttentionWarps * 32) sm90_paged_attention_partial(AttentionArgs args) {
  __shared__ float s_max[kAttentionWarps], s_sum[kAttentionWarps];
  __shared__ float s_acc[kAttentionWarps][kMaxHeadDim];
  device::pdl_enter();
  const auto& shape = args.shape;
  const int64_t token = blockIdx.x, head = blockIdx.y, split = blockIdx.z, d = shape.head_dim, hkv = shape.num_kv_heads;
  const int64_t kv_head = head / (shape.num_heads / hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int per_lane = int(d / 32);
  const int32_t seq = args.layout.token_seq[token];
  const int64_t visible = args.layout.positions[token] + 1;
  const int64_t key_begin = split * args.keys_per_split;
  const int64_t key_end = min(visible, key_begin + args.keys_per_split);
  const int32_t* table = args.layout.block_tables + int64_t(args.layout.slots[seq]) * args.layout.max_blocks;
  const T* k_cache = static_cast<const T*>(args.k_cache);
  const T* v_cache = static_cast<const T*>(args.v_cache);

  float r_q[kMaxPerLane], r_acc[kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    r_q[j] = j < per_lane ? args.q[(token * shape.num_heads + head) * d + lane + 32 * j] * args.scale : 0.0f;
    r_acc[j] = 0.0f;
  }
  float running_max = -INFINITY, running_sum = 0.0f;
  for (int64_t s = key_begin + warp; s < key_end; s += kAttentionWarps) {
    const int64_t row = (int64_t(table[s / shape.block_size]) * shape.block_size + s % shape.block_size) * hkv + kv_head;
    const T* key = k_cache + row * d;
    float partial = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j)
      if (j < per_lane) partial += r_q[j] * device::to_float(key[lane + 32 * j]);
    const float score = device::warp_sum(partial);
    const float new_max = fmaxf(running_max, score);
    const float correction = __expf(running_max - new_max), weight = __expf(score - new_max);
    running_sum = running_sum * correction + weight;
    const T* value = v_cache + row * d;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j)
      if (j < per_lane) r_acc[j] = r_acc[j] * correction + weight * device::to_float(value[lane + 32 * j]);
    running_max = new_max;
  }
  if (lane == 0) {
    s_max[warp] = running_max;
    s_sum[warp] = running_sum;
  }
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j)
    if (j < per_lane) s_acc[warp][lane + 32 * j] = r_acc[j];
  __syncthreads();
  float block_max = -INFINITY;
  for (int w = 0; w < kAttentionWarps; ++w) block_max = fmaxf(block_max, s_max[w]);
  float* out = args.partials + ((token * shape.num_heads + head) * args.num_splits + split) * (d + 2);
  float block_sum = 0.0f;
  for (int w = 0; w < kAttentionWarps; ++w)
    if (s_sum[w] > 0.0f) block_sum += s_sum[w] * __expf(s_max[w] - block_max);
  if (threadIdx.x == 0) {
    out[0] = block_max;
    out[1] = block_sum;  // 0 for an empty split
  }
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    float value = 0.0f;
    for (int w = 0; w < kAttentionWarps; ++w)
      if (s_sum[w] > 0.0f) value += s_acc[w][i] * __expf(s_max[w] - block_max);
    out[2 + i] = value;
  }
}

// Block (token, query head) of 128 threads: merges the splits and applies the sigmoid output gate;
// with q_codes set (head_dim % 128 == 0), quantises each 128-group of the output. Thread t owns
// elements t and t + 128 and every thread reads every split's (max, sum) (the same addresses across
// the block: one request per warp), so nothing waits on a block reduction: splits in chunks of
// kCombineChunk, each chunk's loads issued together, merged with a running max (a chunk raising it
// rescales what came before; an empty split has weight 0). At batch 1 on the 27B (33 splits) the
// earlier version, a block max and a block sum over the splits and then the values eight splits at
// a time, was a chain of ~12 round trips: 11 us per call, more than the attention kernel's 8.7.
constexpr int kCombineThreads = 128, kCombineChunk = 32, kCombineElements = kMaxHeadDim / kCombineThreads;

template <typename T>
__global__ void __launch_bounds__(kCombineThreads) sm90_attention_combine(AttentionArgs args) {
  __shared__ float s_scratch[32];
  device::pdl_enter();
  const auto& shape = args.shape;
  const int64_t token = blockIdx.x, head = blockIdx.y, d = shape.head_dim, splits = args.num_splits;
  const float* partials = args.partials + (token * shape.num_heads + head) * splits * (d + 2);
  const T* gate = static_cast<const T*>(args.gate) + (token * shape.num_heads + head) * d;
  float gate_value[kCombineElements], value[kCombineElements];
#pragma unroll
  for (int e = 0; e < kCombineElements; ++e) {
    const int64_t i = threadIdx.x + e * kCombineThreads;
    gate_value[e] = i < d ? device::to_float(gate[i]) : 0.0f;
    value[e] = 0.0f;
  }
  float running_max = -INFINITY, total_sum = 0.0f;
  for (int64_t s0 = 0; s0 < splits; s0 += kCombineChunk) {
    float r_max[kCombineChunk], r_sum[kCombineChunk], r_value[kCombineElements][kCombineChunk];
#pragma unroll
    for (int j = 0; j < kCombineChunk; ++j) {
      const bool valid = s0 + j < splits;
      const float* split = partials + (s0 + j) * (d + 2);
      r_max[j] = valid ? split[0] : -INFINITY;
      r_sum[j] = valid ? split[1] : 0.0f;
#pragma unroll
      for (int e = 0; e < kCombineElements; ++e) {
        const int64_t i = threadIdx.x + e * kCombineThreads;
        r_value[e][j] = valid && i < d ? split[2 + i] : 0.0f;
      }
    }
    float chunk_max = running_max;
#pragma unroll
    for (int j = 0; j < kCombineChunk; ++j)
      if (r_sum[j] > 0.0f) chunk_max = fmaxf(chunk_max, r_max[j]);
    if (chunk_max == -INFINITY) continue;  // every split so far empty
    if (chunk_max > running_max) {
      const float rescale = running_max == -INFINITY ? 0.0f : __expf(running_max - chunk_max);
      total_sum *= rescale;
#pragma unroll
      for (int e = 0; e < kCombineElements; ++e) value[e] *= rescale;
      running_max = chunk_max;
    }
#pragma unroll
    for (int j = 0; j < kCombineChunk; ++j) {
      const float weight = r_sum[j] > 0.0f ? __expf(r_max[j] - running_max) : 0.0f;
      total_sum += r_sum[j] * weight;
#pragma unroll
      for (int e = 0; e < kCombineElements; ++e) value[e] += r_value[e][j] * weight;
    }
  }
  T* out = static_cast<T*>(args.out) + (token * shape.num_heads + head) * d;
#pragma unroll
  for (int e = 0; e < kCombineElements; ++e) {
    const int64_t i = threadIdx.x + e * kCombineThreads;
    if (e * kCombineThreads >= d) break;  // uniform over the block
    const T result = device::from_float<T>(value[e] / total_sum * device::sigmoid(gate_value[e]));
    if (i < d) out[i] = result;
    if (args.q_codes) {  // d is a multiple of 128 here: every thread holds an element
      const float rounded = device::to_float(result);
      const float scale = fmaxf(device::block_max(fabsf(rounded), s_scratch), 1e-10f) / 448.0f;
      const int64_t element = (token * shape.num_heads + head) * d + i;
      args.q_codes[element] = __nv_fp8_e4m3(fminf(fmaxf(rounded / scale, -448.0f), 448.0f)).__x;
      if (threadIdx.x == 0) args.q_scales[element / 128] = scale;
    }
  }
}

void check_shape(const AttentionShape& shape) {
  VT_CHECK(shape.head_dim % 32 == 0 && shape.head_dim <= kMaxHeadDim, "attention: head_dim ", shape.head_dim,
           " must be a multiple of 32 and <= ", kMaxHeadDim);
  VT_CHECK(shape.num_heads % shape.num_kv_heads == 0, "attention: heads not a multiple of kv heads");
  VT_CHECK(shape.rotary_dim % 2 == 0 && shape.rotary_dim <= shape.head_dim, "attention: bad rotary_dim");
}

}  // namespace

void attention_prepare(float* q_out, void* gate_out, void* k_cache, void* v_cache, const void* projected,
                       const float* q_norm, const float* k_norm, const StepLayout& layout,
                       const AttentionShape& shape, DType act, cudaStream_t stream, void* q_act_out) {
  check_shape(shape);
  VT_CHECK(q_out || q_act_out, "attention_prepare: no q output");
  if (layout.num_tokens == 0) return;
  PrepareArgs args{q_out, q_act_out, gate_out, k_cache, v_cache, projected, q_norm, k_norm, layout, shape};
  dim3 grid(unsigned(layout.num_tokens), unsigned(shape.num_heads + shape.num_kv_heads));
  const double element = double(dtype_size(act)), d = double(shape.head_dim), tokens = double(layout.num_tokens);
  const double width = double(shape.num_heads) * 2 * d + 2 * double(shape.num_kv_heads) * d;
  const ::vt::trace::LaunchCost cost{"cuda",
                                       {layout.num_tokens, shape.num_heads, shape.num_kv_heads, shape.head_dim},
                                       tokens * width * element * 2 +
                                           tokens * double(shape.num_heads) * d * ((q_out ? 4 : 0) + (q_act_out ? element : 0)),
                                       0,
                                       ::vt::trace::OpGroup::kAttention};
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_attention_prepare", cost, sm90_attention_prepare<T>, grid, dim3(kPrepareThreads), 0, stream,
                         args));
}

void paged_attention(void* out, float* partials, const float* q, const void* gate, const void* k_cache,
                     const void* v_cache, const StepLayout& layout, const AttentionShape& shape, int64_t num_splits,
                     int64_t keys_per_split, DType act, cudaStream_t stream, uint8_t* q_codes, float* q_scales,
                     int64_t kv_tokens) {
  check_shape(shape);
  VT_CHECK(num_splits >= 1 && keys_per_split >= 1, "paged_attention: ", num_splits, " splits of ", keys_per_split);
  VT_CHECK(!q_codes || shape.head_dim % 128 == 0, "paged_attention: fused FP8 output needs head_dim % 128 == 0");
  if (layout.num_tokens == 0) return;
  AttentionArgs args{out,       partials,       q, gate, k_cache, v_cache, layout, shape, 1.0f / sqrtf(float(shape.head_dim)),
                     num_splits, keys_per_split, q_codes, q_scales};
  dim3 grid(unsigned(layout.num_tokens), unsigned(shape.num_heads), unsigned(num_splits));
  // K and V of every visible key once per KV head (the query heads of a group share them in L2),
  // the partials written; the combine reads the partials and the gate and writes the output.
  const double element = double(dtype_size(act)), d = double(shape.head_dim), tokens = double(layout.num_tokens);
  const double partial_bytes = tokens * double(shape.num_heads) * double(num_splits) * (d + 2) * 4;
  const ::vt::trace::LaunchCost partial_cost{
      "cuda",
      {layout.num_tokens, shape.num_heads, num_splits, shape.head_dim},
      double(kv_tokens) * double(shape.num_kv_heads) * d * 2 * element + tokens * double(shape.num_heads) * d * 4 +
          partial_bytes,
      4.0 * double(kv_tokens) * double(shape.num_heads) * d,
      ::vt::trace::OpGroup::kAttention};
  const ::vt::trace::LaunchCost combine_cost{"cuda",
                                               {layout.num_tokens, shape.num_heads, num_splits, shape.head_dim},
                                               partial_bytes + tokens * double(shape.num_heads) * d * element * 2, 0,
                                               ::vt::trace::OpGroup::kAttention};
  // The tensor-core kernel where it is built for the shape (bf16: every Qwen3.5-family model), else
  // the grouped CUDA-core one, else a block per query head.
  const dim3 group_grid(unsigned(layout.num_tokens), unsigned(shape.num_kv_heads), unsigned(num_splits));
  if (!launch_grouped_attention(act, args, group_grid, partial_cost, stream))
    VT_DISPATCH_ACT(act, T,
                    launch("sm90_paged_attention_partial", partial_cost, sm90_paged_attention_partial<T>, grid,
                           dim3(kAttentionWarps * 32), 0, stream, args));
  dim3 combine_grid(unsigned(layout.num_tokens), unsigned(shape.num_heads));
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_attention_combine", combine_cost, sm90_attention_combine<T>, combine_grid,
                         dim3(kCombineThreads), 0, stream, args));
}

}  // namespace vt::cuda
