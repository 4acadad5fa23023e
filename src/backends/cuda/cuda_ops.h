// CUDA implementations of ops, host-callable launchers. Kernels take raw pointers and a stream
// and include no engine headers; launchers check their arguments and the launch.
#pragma once

#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace vt::cuda {

// Number of CUDA devices visible (0 when there is no driver or no GPU).
int device_count();
// Device memory (RAII-free helpers for tests and loaders; they throw vt::Error on failure).
void* device_alloc(size_t bytes);
void device_free(void* pointer);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void synchronize();

// out[r, :] = x[r, :] * rsqrt(mean(x^2) + eps) * (weight_offset + w), fp32 in and out.
void rms_norm_f32(float* out, const float* x, const float* w, int64_t rows, int64_t n, float eps,
                  float weight_offset, cudaStream_t stream);

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, n + i].
void silu_mul_f32(float* out, const float* gate_up, int64_t rows, int64_t n, cudaStream_t stream);

}  // namespace vt::cuda
