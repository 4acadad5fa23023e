// CPU references of the MoE ops: the router (softmax, top-k, renormalisation), the grouped layout,
// the expert GEMV (dense and FP8 block-scaled) and the combine; and the routing's memory layout.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ops/moe/moe.h"

namespace vt {

int64_t moe_routing_words(int64_t tokens, int64_t experts, int64_t top_k) {
  const int64_t pairs = tokens * top_k;
  return pairs + (experts + 1) + pairs + std::min(pairs, experts) + 1;
}

MoeRouting moe_routing_in(int32_t* words, float* weights, int64_t tokens, int64_t experts,
                          int64_t top_k) {
  const int64_t pairs = tokens * top_k;
  MoeRouting routing;
  routing.ids = words;
  routing.weights = weights;
  routing.expert_offsets = routing.ids + pairs;
  routing.sorted_pairs = routing.expert_offsets + experts + 1;
  routing.active_experts = routing.sorted_pairs + pairs;
  routing.active_count = routing.active_experts + std::min(pairs, experts);
  return routing;
}

}  // namespace vt

namespace vt::cpu {

void moe_route(int32_t* expert_ids, float* weights, const float* logits, int64_t num_tokens,
               int64_t num_experts, int64_t top_k, bool renormalize, bool shared_expert) {
  std::vector<float> probs(num_experts);
  std::vector<int32_t> order(num_experts);
  const int64_t columns = num_experts + shared_expert, slots = top_k + shared_expert;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = logits + t * columns;
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
      expert_ids[t * slots + i] = order[i];
      weights[t * slots + i] = renormalize ? probs[order[i]] / selected : probs[order[i]];
    }
    if (shared_expert) {
      expert_ids[t * slots + top_k] = int32_t(num_experts);
      weights[t * slots + top_k] = 1.0f / (1.0f + std::exp(-row[num_experts]));
    }
  }
}

void moe_group(const MoeRouting& routing, int64_t num_tokens, int64_t num_experts, int64_t top_k) {
  const int64_t pairs = num_tokens * top_k;
  std::vector<int32_t> count(num_experts, 0);
  for (int64_t p = 0; p < pairs; ++p) ++count[routing.ids[p]];
  int32_t offset = 0, active = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    routing.expert_offsets[e] = offset;
    offset += count[e];
    if (count[e] > 0) routing.active_experts[active++] = int32_t(e);
  }
  routing.expert_offsets[num_experts] = offset;
  *routing.active_count = active;
  std::vector<int32_t> cursor(routing.expert_offsets, routing.expert_offsets + num_experts);
  for (int64_t p = 0; p < pairs; ++p) routing.sorted_pairs[cursor[routing.ids[p]]++] = int32_t(p);
}

void moe_expert_gemv(float* y, const float* x, const int32_t* expert_ids, const float* weights,
                     int64_t pairs, int64_t n, int64_t k, int64_t input_divisor) {
  for (int64_t p = 0; p < pairs; ++p) {
    const float* input = x + (p / input_divisor) * k;
    const float* w = weights + int64_t(expert_ids[p]) * n * k;
    for (int64_t row = 0; row < n; ++row) {
      float sum = 0.0f;
      for (int64_t i = 0; i < k; ++i) sum += w[row * k + i] * input[i];
      y[p * n + row] = sum;
    }
  }
}

void moe_expert_gemv_fp8(float* y, const uint8_t* x, const float* x_scales,
                         const int32_t* expert_ids, const uint8_t* weights, const float* w_scales,
                         int64_t pairs, int64_t n, int64_t k, int64_t input_divisor) {
  constexpr int64_t kGroup = 128;
  const int64_t k_blocks = (k + kGroup - 1) / kGroup, n_blocks = (n + kGroup - 1) / kGroup;
  // e4m3 codes as f32 once (exact).
  float code_value[256];
  for (int c = 0; c < 256; ++c) code_value[c] = f8e4m3_to_f32(uint8_t(c));
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t input = p / input_divisor, expert = expert_ids[p];
    const uint8_t* in = x + input * k;
    for (int64_t row = 0; row < n; ++row) {
      const uint8_t* w = weights + (expert * n + row) * k;
      const float* scales = w_scales + (expert * n_blocks + row / kGroup) * k_blocks;
      float sum = 0.0f;
      for (int64_t block = 0; block < k_blocks; ++block) {
        float dot = 0.0f;
        for (int64_t i = block * kGroup; i < std::min(k, (block + 1) * kGroup); ++i)
          dot += code_value[w[i]] * code_value[in[i]];
        sum += dot * (x_scales[input * k_blocks + block] * scales[block]);
      }
      y[p * n + row] = sum;
    }
  }
}

void moe_combine(float* out, const float* expert_out, const float* weights, const float* shared,
                 const float* shared_gate, int64_t tokens, int64_t hidden, int64_t top_k) {
  for (int64_t t = 0; t < tokens; ++t) {
    const float gate = shared ? 1.0f / (1.0f + std::exp(-shared_gate[t])) : 0.0f;
    for (int64_t i = 0; i < hidden; ++i) {
      float value = 0.0f;
      for (int64_t j = 0; j < top_k; ++j)
        value += weights[t * top_k + j] * expert_out[(t * top_k + j) * hidden + i];
      if (shared) value += gate * shared[t * hidden + i];
      out[t * hidden + i] = value;
    }
  }
}

}  // namespace vt::cpu
