// CPU twin of the device sampling kernel (cuda::sample_rows): the same candidates, nucleus and
// Gumbel-max draw (ops/device_sampling.h), found by sorting instead of radix selects.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "core/threading.h"
#include "ops/sampling/device_sampling.h"
#include "ops/sampling/sampling.h"

namespace vt::cpu {
namespace {

// The first maximum of the raw logits (NaN never wins; 0 when nothing is > -inf), as the kernel.
int32_t first_max(const float* logits, int64_t vocab) {
  float best = -std::numeric_limits<float>::infinity();
  int32_t best_id = -1;
  for (int64_t i = 0; i < vocab; ++i)
    if (logits[i] > best) best = logits[i], best_id = int32_t(i);
  return best_id < 0 ? 0 : best_id;
}

int32_t sample_row(const float* logits, int64_t vocab, const SampleRowParams& params, std::vector<float>& scaled,
                   std::vector<uint64_t>& ranked, std::vector<int32_t>& order) {
  using namespace sampling;
  if (greedy(params)) return first_max(logits, vocab);
  scaled.resize(size_t(vocab));
  for (int64_t i = 0; i < vocab; ++i) scaled[i] = scaled_logit(logits[i], params.temperature);
  const bool cut_k = params.top_k > 0 && params.top_k < vocab, cut_p = params.top_p < 1.0f;
  // The candidates: a prefix of the ids in order of s, highest first, ties by the lower id
  // (ranked: key in the high word, ~id in the low one, in descending order).
  int64_t count = vocab;
  order.resize(size_t(vocab));
  std::iota(order.begin(), order.end(), 0);
  if (cut_k || cut_p) {
    ranked.resize(size_t(vocab));
    for (int64_t i = 0; i < vocab; ++i) ranked[i] = uint64_t(order_key(scaled[i])) << 32 | uint32_t(~uint32_t(i));
    count = cut_k ? params.top_k : vocab;
    std::partial_sort(ranked.begin(), ranked.begin() + count, ranked.end(), std::greater<uint64_t>());
    for (int64_t j = 0; j < count; ++j) order[j] = int32_t(~uint32_t(ranked[j]));
    if (cut_p) {
      const float max_s = scaled[order[0]];
      uint64_t total = 0;
      for (int64_t j = 0; j < count; ++j) total += fixed_mass(scaled[order[j]], max_s);
      const uint64_t target = mass_target(params.top_p, total);
      uint64_t mass = 0;
      for (int64_t j = 0; j < count; ++j) {
        mass += fixed_mass(scaled[order[j]], max_s);
        if (mass >= target) {
          count = j + 1;
          break;
        }
      }
    }
  }
  // Gumbel-max over the candidates, ties to the lower id; 0 when none has a score above -inf.
  float best = -std::numeric_limits<float>::infinity();
  int32_t best_id = std::numeric_limits<int32_t>::max();
  for (int64_t j = 0; j < count; ++j) {
    const int32_t id = order[j];
    const Words words = element_words(params.seed, params.counter, uint64_t(id) / 4);
    const float score = perturbed(scaled[id], words.w[id % 4]);
    if (!(score > -std::numeric_limits<float>::infinity())) continue;  // never drawn (the kernel's rule)
    if (score > best || (score == best && id < best_id)) best = score, best_id = id;
  }
  return best_id == std::numeric_limits<int32_t>::max() ? 0 : best_id;
}

}  // namespace

void sample_rows(int32_t* tokens, const float* logits, int64_t vocab, const SampleRowParams* params, int64_t count) {
  parallel_for(count, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scaled;
    std::vector<uint64_t> ranked;
    std::vector<int32_t> order;
    for (int64_t i = begin; i < end; ++i)
      tokens[i] = sample_row(logits + int64_t(params[i].row) * vocab, vocab, params[i], scaled, ranked, order);
  });
}

}  // namespace vt::cpu
