#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace vt {

TokenLogprob token_logprobs(const float* logits, int64_t vocab, int32_t chosen, int64_t top_count,
                            std::vector<TokenLogprob>& top) {
  VT_CHECK(vocab > 0 && chosen >= 0 && chosen < vocab, "logprobs: token ", chosen, " outside [0, ",
           vocab, ")");
  VT_CHECK(top_count >= 0, "logprobs: top_count ", top_count);
  const float max_logit = *std::max_element(logits, logits + vocab);
  double total = 0;
  for (int64_t i = 0; i < vocab; ++i) total += std::exp(double(logits[i] - max_logit));
  const double log_total = double(max_logit) + std::log(total);
  auto logprob = [&](int64_t id) { return float(double(logits[id]) - log_total); };
  top.clear();
  if (top_count > 0) {
    // A sorted list of the best `keep` ids so far; most tokens fail the first comparison.
    const int64_t keep = std::min(top_count, vocab);
    auto better = [&](int64_t a, int64_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::vector<int64_t> best;
    best.reserve(size_t(keep) + 1);
    for (int64_t i = 0; i < vocab; ++i) {
      if (int64_t(best.size()) == keep && !better(i, best.back())) continue;
      best.insert(std::upper_bound(best.begin(), best.end(), i, better), i);
      if (int64_t(best.size()) > keep) best.pop_back();
    }
    for (int64_t id : best) top.push_back({int32_t(id), logprob(id)});
  }
  return {chosen, logprob(chosen)};
}

}  // namespace vt
