// CPU reference: y = x @ w^T in fp32, parallel over output columns.
#include "core/threading.h"
#include "ops/gemm/gemm.h"

namespace vt::cpu {

// Eight independent partial sums let the compiler vectorise without reassociating.
static float dot(const float* a, const float* b, int64_t k) {
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (int j = 0; j < 8; ++j) partial[j] += a[i + j] * b[i + j];
  float sum = ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
              ((partial[4] + partial[5]) + (partial[6] + partial[7]));
  for (; i < k; ++i) sum += a[i] * b[i];
  return sum;
}

void matmul_nt(float* y, const float* x, const float* w, int64_t m, int64_t n, int64_t k,
               bool accumulate) {
  // Columns outermost: each weight row is read once from memory and reused for all m rows.
  parallel_for(n, 64, [&](int64_t begin, int64_t end) {
    for (int64_t col = begin; col < end; ++col) {
      const float* w_row = w + col * k;
      for (int64_t row = 0; row < m; ++row) {
        float value = dot(x + row * k, w_row, k);
        y[row * n + col] = accumulate ? y[row * n + col] + value : value;
      }
    }
  });
}

}  // namespace vt::cpu
