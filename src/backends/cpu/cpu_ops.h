// The CPU reference of every op: plain, readable, multi-threaded, fp32 compute. Pointers are
// row-major and contiguous; callers (src/ops/) have validated sizes. Shapes in comments.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace vt {
struct SampleRowParams;  // ops/device_sampling.h
}

namespace vt::cpu {

// out[T, H] = table[ids[t], :] (table in any float dtype).
void embedding(float* out, const int32_t* ids, int64_t num_tokens, const void* table, DType dtype,
               int64_t vocab, int64_t hidden);

// out[r, :] = x[r, :] * rsqrt(mean(x^2) + eps) * (weight_offset + w)   for rows of size n.
// Qwen3.5's zero-centred norms use weight_offset 1.
void rms_norm(float* out, const float* x, const float* w, int64_t rows, int64_t n, float eps,
              float weight_offset);

// out[r, :] = w * rmsnorm(x[r, :]) * silu(z[r, :])  (GDN output norm, per value head).
void gated_rms_norm(float* out, const float* x, const float* z, const float* w, int64_t rows,
                    int64_t n, float eps);

// y[M, N] = x[M, K] @ w[N, K]^T (+ y if accumulate).
void matmul_nt(float* y, const float* x, const float* w, int64_t m, int64_t n, int64_t k,
               bool accumulate = false);

// Dynamic FP8 activation quantisation, per row in groups of 128 along K (last group partial):
// scale = max(absmax, 1e-10) / 448, q = e4m3(clamp(x / scale)); writes q * scale.
void fp8_quant_dequant_rows(float* out, const float* x, int64_t rows, int64_t k, int64_t group);

// Dequantises an E4M3 weight [N, K] with block scales [ceil(N/bn), ceil(K/bk)] into f32.
void fp8_block_dequant(float* out, const uint8_t* w, const void* scales, DType scale_dtype,
                       int64_t n, int64_t k, int64_t block_n, int64_t block_k);

// Converts any float dtype to f32.
void to_f32(float* out, const void* in, DType dtype, int64_t count);

// x[T, heads, head_dim]: NeoX rotation of the first rotary_dim dims at positions[t].
void rope_neox(float* x, const int64_t* positions, int64_t num_tokens, int64_t heads,
               int64_t head_dim, int64_t rotary_dim, float theta);

// Causal GQA attention of T new queries over a contiguous cache holding positions [0, cached).
// q[T, Hq, D]; k_cache, v_cache [capacity, Hkv, D]; query t sits at position start + t and sees
// cache rows [0, start + t]. out[T, Hq, D].
void attention_causal(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int64_t num_tokens, int64_t start, int64_t num_heads, int64_t num_kv_heads,
                      int64_t head_dim, float scale);

// Depthwise causal conv1d (no bias) + SiLU over T steps with a rolling state.
// x[T, C]; weight[C, K]; state[C, K-1] holds the previous K-1 inputs (oldest first), updated.
void causal_conv1d_silu(float* out, const float* x, float* state, const float* weight,
                        int64_t num_tokens, int64_t channels, int64_t kernel);

// Gated delta rule, per value head h (key head h / (Hv/Hk)). q, k [T, Hk, dk] already
// L2-normalised, q scaled by dk^-0.5; v [T, Hv, dv]; g, beta [T, Hv]; state [Hv, dk, dv] (fp32,
// updated in place); out [T, Hv, dv].
void gated_delta_rule_recurrent(float* out, const float* q, const float* k, const float* v,
                                const float* g, const float* beta, float* state, int64_t num_tokens,
                                int64_t num_k_heads, int64_t num_v_heads, int64_t dk, int64_t dv);
// Same function computed in chunks (WY / UT-transform form, as HF's torch_chunk_gated_delta_rule).
void gated_delta_rule_chunked(float* out, const float* q, const float* k, const float* v,
                              const float* g, const float* beta, float* state, int64_t num_tokens,
                              int64_t num_k_heads, int64_t num_v_heads, int64_t dk, int64_t dv,
                              int64_t chunk_size);

// x[rows, n] /= sqrt(sum(x^2) + eps), per row.
void l2_normalize(float* x, int64_t rows, int64_t n, float eps);

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, n + i]; gate_up [rows, 2n], out [rows, n].
void silu_mul(float* out, const float* gate_up, int64_t rows, int64_t n);

// Softmax router: logits [T, E] -> top-k expert ids and weights per token (renormalised if asked).
void moe_route(int32_t* expert_ids, float* weights, const float* logits, int64_t num_tokens,
               int64_t num_experts, int64_t top_k, bool renormalize);

// The device sampling kernel's twin (cuda::sample_rows, ops/device_sampling.h): tokens[i] drawn
// from row params[i].row of logits [rows, vocab] with params[i]; the same token as the kernel's
// but where f32 log/exp round differently on the two sides (a score or a nucleus boundary within
// an ulp).
void sample_rows(int32_t* tokens, const float* logits, int64_t vocab, const SampleRowParams* params, int64_t count);

}  // namespace vt::cpu
