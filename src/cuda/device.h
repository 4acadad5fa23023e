// The CUDA runtime pieces the ops and the models share: devices, copies, synchronisation, fills.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/stream.h"

namespace vt::cuda {

int device_count();
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void synchronize();

// ---- synthetic weights ----
// Deterministic pseudo-random fill (hash of seed and index): uniform in [-scale, scale] + offset.
void fill_random(void* data, DType dtype, int64_t count, uint64_t seed, float scale, float offset,
                 cudaStream_t stream);
// Random E4M3 codes with magnitudes up to 448 (no NaN codes).
void fill_random_fp8(uint8_t* data, int64_t count, uint64_t seed, cudaStream_t stream);

// Converts any float dtype to `out_dtype` (f32 or bf16) on the device.
void convert(void* out, DType out_dtype, const void* in, DType in_dtype, int64_t count, cudaStream_t stream);


}  // namespace vt::cuda
