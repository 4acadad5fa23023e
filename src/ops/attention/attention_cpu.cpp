// CPU reference: partial NeoX RoPE and causal GQA attention over a contiguous KV cache.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/threading.h"
#include "ops/attention/attention.h"

namespace vt::cpu {

void rope_neox(float* x, const int64_t* positions, int64_t num_tokens, int64_t heads,
               int64_t head_dim, int64_t rotary_dim, const Rope& rope) {
  const int64_t half = rotary_dim / 2;
  // Same float32 arithmetic as HF: angle = pos * inv_freq; cos and sin times the attention factor.
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = rope_inv_freq(rope, i, rotary_dim);
  parallel_for(num_tokens, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        float angle = float(positions[t]) * inv_freq[i];
        float cos = std::cos(angle) * rope.attention_factor, sin = std::sin(angle) * rope.attention_factor;
        for (int64_t h = 0; h < heads; ++h) {
          float* head = x + (t * heads + h) * head_dim;
          float x1 = head[i], x2 = head[i + half];
          head[i] = x1 * cos - x2 * sin;
          head[i + half] = x2 * cos + x1 * sin;
        }
      }
    }
  });
}

void attention_causal(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int64_t num_tokens, int64_t start, int64_t num_heads, int64_t num_kv_heads,
                      int64_t head_dim, float scale) {
  const int64_t group = num_heads / num_kv_heads;
  parallel_for(num_tokens * num_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t index = begin; index < end; ++index) {
      const int64_t t = index / num_heads, h = index % num_heads, kv_head = h / group;
      const int64_t visible = start + t + 1;
      const float* query = q + (t * num_heads + h) * head_dim;
      scores.resize(visible);
      float max_score = -INFINITY;
      for (int64_t s = 0; s < visible; ++s) {
        const float* key = k_cache + (s * num_kv_heads + kv_head) * head_dim;
        float dot = 0.0f;
        for (int64_t d = 0; d < head_dim; ++d) dot += query[d] * key[d];
        scores[s] = dot * scale;
        max_score = std::max(max_score, scores[s]);
      }
      float sum = 0.0f;
      for (int64_t s = 0; s < visible; ++s) sum += scores[s] = std::exp(scores[s] - max_score);
      float* output = out + (t * num_heads + h) * head_dim;
      std::fill(output, output + head_dim, 0.0f);
      for (int64_t s = 0; s < visible; ++s) {
        const float* value = v_cache + (s * num_kv_heads + kv_head) * head_dim;
        float p = scores[s] / sum;
        for (int64_t d = 0; d < head_dim; ++d) output[d] += p * value[d];
      }
    }
  });
}

}  // namespace vt::cpu
