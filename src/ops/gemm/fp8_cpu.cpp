// CPU reference of the FP8 W8A8 path: per-token 1x128 activation quantisation and 128x128
// block-scaled weight dequantisation, computing what the GPU kernels compute.
#include <algorithm>
#include <cmath>

#include "core/threading.h"
#include "ops/gemm/gemm.h"

namespace vt::cpu {

void fp8_quant_dequant_rows(float* out, const float* x, int64_t rows, int64_t k, int64_t group) {
  parallel_for(rows, 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t g0 = 0; g0 < k; g0 += group) {
        int64_t g1 = std::min(k, g0 + group);
        float absmax = 0.0f;
        for (int64_t i = g0; i < g1; ++i) absmax = std::max(absmax, std::fabs(x[r * k + i]));
        float scale = std::max(absmax, 1e-10f) / kF8E4M3Max;
        for (int64_t i = g0; i < g1; ++i) {
          float scaled = std::clamp(x[r * k + i] / scale, -kF8E4M3Max, kF8E4M3Max);
          out[r * k + i] = f8e4m3_to_f32(f32_to_f8e4m3(scaled)) * scale;
        }
      }
    }
  });
}

void fp8_block_dequant(float* out, const uint8_t* w, const void* scales, DType scale_dtype,
                       int64_t n, int64_t k, int64_t block_n, int64_t block_k) {
  const int64_t scale_cols = (k + block_k - 1) / block_k;
  parallel_for(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row)
      for (int64_t col = 0; col < k; ++col) {
        float scale = load_as_f32(scales, scale_dtype, size_t((row / block_n) * scale_cols + col / block_k));
        out[row * k + col] = f8e4m3_to_f32(w[row * k + col]) * scale;
      }
  });
}

}  // namespace vt::cpu
