// CPU reference: SwiGLU and the MoE router.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "core/threading.h"

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

void moe_route(int32_t* expert_ids, float* weights, const float* logits, int64_t num_tokens,
               int64_t num_experts, int64_t top_k, bool renormalize) {
  std::vector<float> probs(num_experts);
  std::vector<int32_t> order(num_experts);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = logits + t * num_experts;
    float max_logit = *std::max_element(row, row + num_experts);
    float sum = 0.0f;
    for (int64_t e = 0; e < num_experts; ++e) sum += probs[e] = std::exp(row[e] - max_logit);
    for (int64_t e = 0; e < num_experts; ++e) probs[e] /= sum;
    std::iota(order.begin(), order.end(), 0);
    // Highest probability first; ties go to the lower expert id (as torch.topk on CPU).
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
      return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
    });
    float selected = 0.0f;
    for (int64_t i = 0; i < top_k; ++i) selected += probs[order[i]];
    for (int64_t i = 0; i < top_k; ++i) {
      expert_ids[t * top_k + i] = order[i];
      weights[t * top_k + i] = renormalize ? probs[order[i]] / selected : probs[order[i]];
    }
  }
}

}  // namespace vt::cpu
