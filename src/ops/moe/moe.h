// Mixture of experts: the router on the CPU (the reference), and the router, expert GEMV and
// combine kernels on CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/stream.h"

namespace vt::cpu {

// Softmax router: logits [T, E] -> top-k expert ids and weights per token (renormalised if asked).
void moe_route(int32_t* expert_ids, float* weights, const float* logits, int64_t num_tokens,
               int64_t num_experts, int64_t top_k, bool renormalize);

}  // namespace vt::cpu

namespace vt::cuda {

// ---- MoE ----
// Softmax over logits [T, E] act, top-k per token (ties to the lower id), optionally
// renormalised: ids [T, k] i32, weights [T, k] f32.
void moe_route(int32_t* ids, float* weights, const void* logits, int64_t tokens, int64_t experts, int64_t top_k,
               bool renormalize, DType act, cudaStream_t stream);
// y [pairs, n] act = W[expert_ids[p]] [n, k] . x[p / input_divisor] for every (token, expert)
// pair p; weights stacked [E, n, k] in act dtype or e4m3 (with [E, n/128, k/128] scales and x as
// e4m3 codes with [rows, k/128] scales). experts_read: how many distinct experts' weights the
// caller expects the launch to read (the routing is on the device), for the profile's bytes; 0:
// every pair's.
void moe_expert_gemv(void* y, const void* x, const float* x_scales, const int32_t* expert_ids, const void* weights,
                     const float* w_scales, int64_t pairs, int64_t n, int64_t k, int64_t input_divisor, bool fp8,
                     DType act, cudaStream_t stream, double experts_read = 0);
// out [T, H] = sum_j weights[t, j] expert_out[t*k + j] (+ sigmoid(shared_gate[t]) shared[t] when
// shared is not null).
void moe_combine(void* out, const void* expert_out, const float* weights, const void* shared, const void* shared_gate,
                 int64_t tokens, int64_t hidden, int64_t top_k, DType act, cudaStream_t stream);


}  // namespace vt::cuda
