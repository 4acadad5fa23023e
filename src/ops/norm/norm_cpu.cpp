// CPU reference: RMSNorm variants and L2 normalisation.
#include <cmath>

#include "core/threading.h"
#include "ops/norm/norm.h"

namespace vt::cpu {

static float inverse_rms(const float* x, int64_t n, float eps) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  return 1.0f / std::sqrt(sum / float(n) + eps);
}

void rms_norm(float* out, const float* x, const float* w, int64_t rows, int64_t n, float eps,
              float weight_offset) {
  parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = x + r * n;
      float scale = inverse_rms(row, n, eps);
      for (int64_t i = 0; i < n; ++i) out[r * n + i] = row[i] * scale * (weight_offset + w[i]);
    }
  });
}

void gated_rms_norm(float* out, const float* x, const float* z, const float* w, int64_t rows,
                    int64_t n, float eps) {
  parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = x + r * n;
      float scale = inverse_rms(row, n, eps);
      for (int64_t i = 0; i < n; ++i) {
        float gate = z[r * n + i];
        float silu = gate / (1.0f + std::exp(-gate));
        out[r * n + i] = w[i] * (row[i] * scale) * silu;
      }
    }
  });
}

void l2_normalize(float* x, int64_t rows, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * n;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += row[i] * row[i];
    float scale = 1.0f / std::sqrt(sum + eps);
    for (int64_t i = 0; i < n; ++i) row[i] *= scale;
  }
}


}  // namespace vt::cpu
