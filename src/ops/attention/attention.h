// Gated attention over a paged KV cache: RoPE and causal attention on the CPU (the reference),
// the prepare (norms, RoPE, cache writes) and flash-decoding kernels on CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/stream.h"
#include "ops/step_layout.h"

namespace vt::cpu {

// x[T, heads, head_dim]: NeoX rotation of the first rotary_dim dims at positions[t].
void rope_neox(float* x, const int64_t* positions, int64_t num_tokens, int64_t heads,
               int64_t head_dim, int64_t rotary_dim, float theta);

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
  float rope_theta, eps;
};

// Splits projected [T, Hq*2D + 2*Hkv*D] (per head [q | gate], then k, then v): q_norm/k_norm
// (zero-centred, f32 weights), partial NeoX RoPE, q -> q_out [T, Hq, D] f32, gate -> gate_out
// [T, Hq*D] act, k and v into the paged caches [blocks, block_size, Hkv, D] act.
void attention_prepare(float* q_out, void* gate_out, void* k_cache, void* v_cache, const void* projected,
                       const float* q_norm, const float* k_norm, const StepLayout& layout,
                       const AttentionShape& shape, DType act, cudaStream_t stream);

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

}  // namespace vt::cuda
