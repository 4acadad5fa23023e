// RMSNorm: the CPU reference and the CUDA kernels (with the residual add, a GEMM's partials as the
// branch, and the FP8 codes of the output fused for the next linear).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/stream.h"
#include "ops/gemm/partials.h"

namespace vt::cpu {

// out[r, :] = x[r, :] * rsqrt(mean(x^2) + eps) * (weight_offset + w)   for rows of size n.
// Qwen3.5's zero-centred norms use weight_offset 1.
void rms_norm(float* out, const float* x, const float* w, int64_t rows, int64_t n, float eps,
              float weight_offset);

// out[r, :] = w * rmsnorm(x[r, :]) * silu(z[r, :])  (GDN output norm, per value head).
void gated_rms_norm(float* out, const float* x, const float* z, const float* w, int64_t rows,
                    int64_t n, float eps);

// x[rows, n] /= sqrt(sum(x^2) + eps), per row.
void l2_normalize(float* x, int64_t rows, int64_t n, float eps);

}  // namespace vt::cpu

namespace vt::cuda {

void rms_norm_f32(float* out, const float* x, const float* w, int64_t rows, int64_t n, float eps,
                  float weight_offset, cudaStream_t stream);

// A MoE layer's output left as its pairs (cuda::moe_combine's inputs without a separate shared
// expert): row t is sum_j weights[t * top_k + j] * values[t * top_k + j] (j in order, f32), rounded
// to act as the combine stores it.
struct MoePairs {
  const void* values = nullptr;  // [rows * top_k, n] act: each pair's expert output
  const float* weights = nullptr;  // [rows * top_k]
  int64_t top_k = 0;
};

// What a norm adds to the residual: rows of act values, a GEMM's partials (rounded to act as the
// GEMM would store them), a MoE layer's pairs (combined as moe_combine would), or nothing (null
// values).
struct Branch {
  const void* values = nullptr;
  const GemmPartials* partials = nullptr;
  const MoePairs* pairs = nullptr;
  Branch(std::nullptr_t) {}             // NOLINT: no branch
  Branch(const void* v) : values(v) {}  // NOLINT: a plain pointer is the usual branch
  Branch(const GemmPartials* p) : partials(p) {}
  Branch(const MoePairs* p) : pairs(p) {}
  bool empty() const { return !values && !partials && !pairs; }
};

// residual [rows, n] += branch (skipped when it is empty); out = rmsnorm(residual) * (offset + w).
// w is f32 [n]. out may not alias residual. With q set (n % 128 == 0), also writes out's FP8
// quantisation for the next W8A8 linear: q [rows, n] e4m3, q_scales [rows, n/128] (as
// fp8_quantize_rows would, bit for bit). A partials or pairs branch needs n % 128 == 0.
void add_rms_norm(void* out, void* residual, Branch branch, const float* w, int64_t rows,
                  int64_t n, float eps, float weight_offset, DType act, cudaStream_t stream,
                  uint8_t* q = nullptr, float* q_scales = nullptr);

// out [rows, 2n] act = [rmsnorm(a) * (offset + w_a) | rmsnorm(b) * (offset + w_b)]: two rows normed
// side by side (the MTP head's fc input: normed embedding | normed hidden). a, b [rows, n] act;
// w_a, w_b f32 [n]. out may not alias a or b.
void rms_norm_concat(void* out, const void* a, const float* w_a, const void* b, const float* w_b, int64_t rows,
                     int64_t n, float eps, float weight_offset, DType act, cudaStream_t stream);


}  // namespace vt::cuda
