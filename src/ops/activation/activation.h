// SwiGLU: the CPU reference and the CUDA kernel (with the FP8 codes of its output fused).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/stream.h"

namespace vt::cpu {

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, n + i]; gate_up [rows, 2n], out [rows, n].
void silu_mul(float* out, const float* gate_up, int64_t rows, int64_t n);

}  // namespace vt::cpu

namespace vt::cuda {

void silu_mul_f32(float* out, const float* gate_up, int64_t rows, int64_t n, cudaStream_t stream);

// gate_up [rows, 2n] act -> out [rows, n] act: silu(gate) * up. With q set (n % 128 == 0), also
// writes out's FP8 quantisation (q [rows, n], q_scales [rows, n/128]) for the down projection;
// then out may be null where nothing reads the act-dtype rows (a third of the kernel's bytes).
void silu_mul(void* out, const void* gate_up, int64_t rows, int64_t n, DType act, cudaStream_t stream,
              uint8_t* q = nullptr, float* q_scales = nullptr);


}  // namespace vt::cuda
