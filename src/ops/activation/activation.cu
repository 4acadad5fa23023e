// SwiGLU on the device: silu(gate) * up, with the FP8 codes of its output fused for the down projection.
#include <cuda_bf16.h>

#include "ops/activation/activation.h"

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/launch.cuh"

namespace vt::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t count) { return unsigned((count + kThreads - 1) / kThreads); }

template <typename T>
__global__ void sm90_silu_mul(T* __restrict__ g_out, const T* __restrict__ g_gate_up, int64_t rows, int64_t n) {
  device::pdl_enter();
  const int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= rows * n) return;
  const int64_t row = index / n, col = index % n;
  const float gate = device::to_float(g_gate_up[row * 2 * n + col]);
  g_out[index] = device::from_float<T>(device::silu(gate) * device::to_float(g_gate_up[row * 2 * n + n + col]));
}

// n % 128 == 0. Grid (rows, n / (8 * kThreads)): each thread 8 consecutive outputs; each
// half-warp one 1x128 group, quantised to e4m3 for the down projection when g_q is set.
template <typename T>
__global__ void __launch_bounds__(kThreads) sm90_silu_mul_quant(T* __restrict__ g_out, const T* __restrict__ g_gate_up,
                                                                uint8_t* __restrict__ g_q, float* __restrict__ g_scales,
                                                                int64_t n) {
  device::pdl_enter();
  const int64_t row = blockIdx.y, chunk = int64_t(blockIdx.x) * kThreads + threadIdx.x, chunks = n / 8;
  const bool active = chunk < chunks;
  float r_y[8];
  if (active) {
    float r_gate[8], r_up[8];
    device::load8(g_gate_up + row * 2 * n + chunk * 8, r_gate);
    device::load8(g_gate_up + row * 2 * n + n + chunk * 8, r_up);
#pragma unroll
    for (int i = 0; i < 8; ++i) r_y[i] = device::round_to(device::silu(r_gate[i]) * r_up[i], g_out);
    if (g_out) device::store8(g_out + row * n + chunk * 8, r_y);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) r_y[i] = 0.0f;
  }
  if (g_q)
    device::quantize8_half_warp(r_y, g_q + row * n + chunk * 8, g_scales + row * (n / 128) + chunk / 16, active,
                                threadIdx.x % 16 == 0);
}

}  // namespace

void silu_mul(void* out, const void* gate_up, int64_t rows, int64_t n, DType act, cudaStream_t stream, uint8_t* q,
              float* q_scales) {
  VT_CHECK(rows >= 0 && rows <= 65535 && n > 0, "silu_mul: rows ", rows, " n ", n);
  VT_CHECK(!q || n % 128 == 0, "silu_mul: fused FP8 output needs n % 128 == 0 (n = ", n, ")");
  VT_CHECK(out || q, "silu_mul: no output (out and q both null)");
  if (rows == 0) return;
  const ::vt::trace::LaunchCost cost{"cuda",
                                       {rows, n, 0, 0},
                                       double(rows) * double(n) * (out ? 3 : 2) * double(dtype_size(act)) +
                                           (q ? double(rows) * double(n) * (1 + 4.0 / 128) : 0),
                                       0,
                                       ::vt::trace::OpGroup::kElementwise};
  if (n % 128 == 0) {
    const dim3 grid(unsigned((n / 8 + kThreads - 1) / kThreads), unsigned(rows));
    VT_DISPATCH_ACT(act, T,
                    launch("sm90_silu_mul_quant", cost, sm90_silu_mul_quant<T>, grid, dim3(kThreads), 0, stream,
                           static_cast<T*>(out), static_cast<const T*>(gate_up), q, q_scales, n));
    return;
  }
  VT_DISPATCH_ACT(act, T,
                  launch("sm90_silu_mul", cost, sm90_silu_mul<T>, dim3(blocks_for(rows * n)), dim3(kThreads), 0, stream,
                         static_cast<T*>(out), static_cast<const T*>(gate_up), rows, n));
}

void silu_mul_f32(float* out, const float* gate_up, int64_t rows, int64_t n, cudaStream_t stream) {
  silu_mul(out, gate_up, rows, n, DType::kF32, stream);
}

}  // namespace vt::cuda
