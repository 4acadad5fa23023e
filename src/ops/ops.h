// The op API: one function per op on TensorViews. Each validates shapes and dtypes once, then
// runs the CPU reference (each op's folder holds its CUDA kernels too, which the CUDA
// forward calls directly). Shapes are written [rows, cols] in the comments; all f32 unless
// stated. While a trace::OpRecorder runs, each call is timed with its bytes and FLOPs.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/attention/rope.h"
#include "trace/intent.h"

namespace vt::ops {

// out [T, H] = table [V, H] (any float dtype) gathered at ids [T] (i32, each < V).
void embedding(const TensorView& out, const TensorView& ids, const TensorView& table);

// Row-wise RMSNorm over the last dim: out = x * rsqrt(mean(x^2) + eps) * (weight_offset + w).
void rms_norm(const TensorView& out, const TensorView& x, const TensorView& w, float eps,
              float weight_offset);

// GDN output norm: out = w * rmsnorm(x) * silu(z), rows of the last dim of w.
void gated_rms_norm(const TensorView& out, const TensorView& x, const TensorView& z,
                    const TensorView& w, float eps);

// In place on x [T, heads, head_dim]; positions [T] (i64).
void rope_neox(const TensorView& x, const TensorView& positions, int64_t rotary_dim, const Rope& rope);

// q [T, Hq, D] at positions start..start+T-1 over caches [capacity, Hkv, D] filled to start+T.
void attention_causal(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                      const TensorView& v_cache, int64_t start, float scale);

// x [T, C] -> out [T, C]; weight [C, K]; state [C, K-1] updated.
void causal_conv1d_silu(const TensorView& out, const TensorView& x, const TensorView& state,
                        const TensorView& weight);

enum class DeltaRuleMode { kRecurrent, kChunked };
// q, k [T, Hk, dk] (normalised, q scaled); v [T, Hv, dv]; g, beta [T, Hv]; state [Hv, dk, dv].
void gated_delta_rule(const TensorView& out, const TensorView& q, const TensorView& k,
                      const TensorView& v, const TensorView& g, const TensorView& beta,
                      const TensorView& state, DeltaRuleMode mode, int64_t chunk_size = 64);

// x [..., n] normalised in place per last-dim row.
void l2_normalize(const TensorView& x, float eps);

// gate_up [rows, 2n] -> out [rows, n].
void silu_mul(const TensorView& out, const TensorView& gate_up);

// logits [T, E] -> expert_ids [T, k] (i32), weights [T, k].
void moe_route(const TensorView& expert_ids, const TensorView& weights, const TensorView& logits,
               bool renormalize);

// x += y, elementwise (the residual add), same shapes.
void add_in_place(const TensorView& x, const TensorView& y);

// y [M, N] = x [M, K] @ w [N, K]^T (+ y when accumulate). `group` says what the GEMM serves, for
// profiles (Linear passes the group of its weight).
void matmul_nt(const TensorView& y, const TensorView& x, const TensorView& w,
               bool accumulate = false, trace::OpGroup group = trace::OpGroup::kGemmOther);

// out [rows, K] = dequant(quant_e4m3(x)) with per-row groups of `group` along K.
void fp8_quant_dequant(const TensorView& out, const TensorView& x, int64_t group = 128);

}  // namespace vt::ops
