// SwiGLU: out = silu(gate) * up over [rows, 2n] gate|up rows; one thread per output element.
#include "backends/cuda/check.h"
#include "backends/cuda/cuda_ops.h"

namespace vt::cuda {
namespace {

__global__ void sm90_f32_silu_mul(float* __restrict__ g_out, const float* __restrict__ g_gate_up,
                                  int64_t rows, int64_t n) {
  const int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= rows * n) return;
  const int64_t row = index / n, col = index % n;
  const float gate = g_gate_up[row * 2 * n + col];
  g_out[index] = gate / (1.0f + __expf(-gate)) * g_gate_up[row * 2 * n + n + col];
}

}  // namespace

void silu_mul_f32(float* out, const float* gate_up, int64_t rows, int64_t n, cudaStream_t stream) {
  VT_CHECK(rows >= 0 && n > 0, "silu_mul_f32: rows ", rows, " n ", n);
  const int64_t total = rows * n;
  if (total == 0) return;
  constexpr int kThreads = 256;
  sm90_f32_silu_mul<<<unsigned((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(out, gate_up, rows, n);
  VT_CUDA_CHECK_LAUNCH("sm90_f32_silu_mul");
}

}  // namespace vt::cuda
