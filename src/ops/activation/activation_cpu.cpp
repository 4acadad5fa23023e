// CPU reference: SwiGLU.
#include <cmath>

#include "core/threading.h"
#include "ops/activation/activation.h"

namespace vt::cpu {

void silu_mul(float* out, const float* gate_up, int64_t rows, int64_t n) {
  parallel_for(rows, 4, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t i = 0; i < n; ++i) {
        float gate = gate_up[r * 2 * n + i];
        out[r * n + i] = gate / (1.0f + std::exp(-gate)) * gate_up[r * 2 * n + n + i];
      }
  });
}

}  // namespace vt::cpu
