// Gated attention over a paged KV cache: RoPE and causal attention on the CPU (the reference),
// the prepare (norms, RoPE, cache writes) and flash-decoding kernels on CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/stream.h"
#include "ops/attention/rope.h"
#include "ops/step_layout.h"

namespace vt::cpu {

// x[T, heads, head_dim]: NeoX rotation of the first rotary_dim dims at positions[t].
void rope_neox(float* x, const int64_t* positions, int64_t num_tokens, int64_t heads,
               int64_t head_dim, int64_t rotary_dim, const Rope& rope);

// Causal GQA attention of T new queries over a contiguous cache holding positions [0, cached).
// q[T, Hq, D]; k_cache, v_cache [capacity, Hkv, D]; query t sits at position start + t and sees
// cache rows [0, start + t]. out[T, Hq, D].
void attention_causal(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int64_t num_tokens, int64_t start, int64_t num_heads, int64_t num_kv_heads,
                      int64_t head_dim, float scale);

}  // namespace vt::cpu

namespace vt::cuda {

struct AttentionShape {
  int64_t num_heads, num_kv_heads, head_dim, rotary_dim, block_size;
  Rope rope;
  float eps;
};

// Splits projected [T, Hq*2D + 2*Hkv*D] (per head [q | gate], then k, then v): q_norm/k_norm
// (zero-centred, f32 weights), partial NeoX RoPE, q -> q_out [T, Hq, D] f32 (paged_attention's)
// and/or q_act_out [T, Hq, D] act (prefill_attention's; either may be null), gate -> gate_out
// [T, Hq*D] act, k and v into the paged caches [blocks, block_size, Hkv, D] act.
void attention_prepare(float* q_out, void* gate_out, void* k_cache, void* v_cache, const void* projected,
                       const float* q_norm, const float* k_norm, const StepLayout& layout,
                       const AttentionShape& shape, DType act, cudaStream_t stream, void* q_act_out = nullptr);

// Causal GQA attention of each token over its sequence's cache [0, position], times
// sigmoid(gate): out [T, Hq*D] act. The keys are split into `num_splits` ranges (flash-decoding:
// more blocks when few tokens; the grouped kernels split each token's visible keys evenly, the
// per-head kernel takes ranges of `keys_per_split`), merged in a fixed order; partials holds
// [T, Hq, num_splits, D + 2] f32.
// With q_codes set (head_dim % 128 == 0), also writes out's FP8 quantisation for the o_proj
// ([T, Hq*D] e4m3, [T, Hq*D/128] scales). kv_tokens: the keys the step's tokens see in all
// (sum of position + 1), for the bytes the profile reports (0 if unknown).
void paged_attention(void* out, float* partials, const float* q, const void* gate, const void* k_cache,
                     const void* v_cache, const StepLayout& layout, const AttentionShape& shape, int64_t num_splits,
                     int64_t keys_per_split, DType act, cudaStream_t stream, uint8_t* q_codes = nullptr,
                     float* q_scales = nullptr, int64_t kv_tokens = 0);

// How many (token, KV head, split) blocks one paged_attention launch should have when few tokens
// run, for the kernel it chooses for `shape` and `act`: one per SM for the tensor-core kernel (a
// block fills most of an SM's shared memory; measured on the H200: 132 blocks 484 us per step at
// batch 16 on the 27B, 512 blocks 654), 512 for the CUDA-core ones. The grouped kernels split each
// token's visible keys evenly over the splits (keys_per_split is the per-head kernel's).
int64_t attention_target_blocks(const AttentionShape& shape, DType act);

class PrefillAttentionPlan;  // ops/attention/prefill_plan.h

// Prefill attention on the tensor cores (prefill_sm90.cu): FlashInfer's sm90 FA3-style kernel,
// built where CMake found FlashInfer's headers (VT_WITH_FLASHINFER; else supports() is false).
// Serves bf16 at head_dim 256, any GQA group and block size.
bool prefill_attention_supports(const AttentionShape& shape, DType act);
// The persistent CTAs a plan for prefill_attention must spread its work over: the device's SMs.
int64_t prefill_attention_ctas();
// Causal GQA attention of the planned sequences' new tokens, each over its sequence's paged cache
// (its cached prefix and its new keys, already written by attention_prepare), times
// sigmoid(gate): out [T, Hq*D] bf16, the rows of the planned tokens only. q [T, Hq, D] bf16
// (attention_prepare's q_act_out); attention [T, Hq, D] bf16 scratch (the kernel's output before
// the gate); plan_device: plan.packed() on the device; layout: the step's (T, block tables). With
// q_codes set, also the rows' FP8 quantisation for the o_proj, as paged_attention.
void prefill_attention(void* out, void* attention, const void* q, const void* gate, const void* k_cache,
                       const void* v_cache, const StepLayout& layout, const PrefillAttentionPlan& plan,
                       const int32_t* plan_device, const AttentionShape& shape, cudaStream_t stream,
                       uint8_t* q_codes = nullptr, float* q_scales = nullptr);

}  // namespace vt::cuda
