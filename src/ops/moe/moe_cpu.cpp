// CPU reference: the MoE router (softmax, top-k, renormalisation).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ops/moe/moe.h"

namespace vt::cpu {

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
