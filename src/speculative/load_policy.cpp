#include "speculative/load_policy.h"

#include <algorithm>
#include <numeric>


namespace vt {
namespace {

// The moving average's weight of a new step: steps of one count vary with the contexts in them.
constexpr double kNewWeight = 0.25;

}  // namespace

SpeculationLoadPolicy::SpeculationLoadPolicy(int64_t max_tokens) : seconds_(size_t(std::max<int64_t>(max_tokens, 1)) + 1, -1.0) {}

void SpeculationLoadPolicy::observe_step(int64_t tokens, double seconds) {
  if (tokens <= 0 || tokens >= int64_t(seconds_.size()) || seconds <= 0) return;
  double& average = seconds_[size_t(tokens)];
  average = average < 0 ? seconds : (1 - kNewWeight) * average + kNewWeight * seconds;
}

double SpeculationLoadPolicy::cost(int64_t tokens) const {
  tokens = std::clamp<int64_t>(tokens, 1, int64_t(seconds_.size()) - 1);
  for (int64_t distance = 0; distance < int64_t(seconds_.size()); ++distance) {
    // Below first: of two counts equally near, the cheaper side (an unknown cost is tried).
    for (int64_t count : {tokens - distance, tokens + distance})
      if (count >= 1 && count < int64_t(seconds_.size()) && seconds_[size_t(count)] >= 0) return seconds_[size_t(count)];
  }
  return 1.0;
}

bool SpeculationLoadPolicy::measured_near(int64_t tokens) const {
  const int64_t low = tokens / 2, high = std::min<int64_t>(tokens * 2, int64_t(seconds_.size()) - 1);
  for (int64_t count = std::max<int64_t>(low, 1); count <= high; ++count)
    if (seconds_[size_t(count)] >= 0) return true;
  return false;
}

std::vector<bool> SpeculationLoadPolicy::choose(int64_t fixed_tokens, double fixed_emitted,
                                                std::span<const Candidate> candidates) {
  const size_t n = candidates.size();
  std::vector<bool> drafts(n, false);
  if (n == 0) return drafts;
  // Best tokens gained per drafted token first: each prefix of this order is a choice.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  const auto gain = [&](size_t i) {
    return candidates[i].drafts > 0 ? candidates[i].mean_accepted / double(candidates[i].drafts) : 0.0;
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return gain(a) > gain(b); });
  int64_t tokens = fixed_tokens + int64_t(n);  // every candidate verifies its last token at least
  double emitted = fixed_emitted + double(n);
  size_t best = 0;
  double best_rate = emitted / cost(tokens);
  for (size_t taken = 1; taken <= n; ++taken) {
    const Candidate& candidate = candidates[order[taken - 1]];
    tokens += candidate.drafts;
    emitted += candidate.mean_accepted;
    const double rate = emitted / cost(tokens);
    if (rate > best_rate) best_rate = rate, best = taken;
  }
  // The other choice is taken when no step of its size (within a factor of two) was measured
  // (every other decision, so the one chosen gets measured too), and every kExploreEvery decisions.
  const size_t other = best == n ? 0 : n;
  int64_t other_tokens = fixed_tokens + int64_t(n);
  for (size_t taken = 0; taken < other; ++taken) other_tokens += candidates[order[taken]].drafts;
  ++decisions_;
  if (decisions_ % kExploreEvery == 0 || (decisions_ % 2 == 0 && !measured_near(other_tokens))) best = other;
  for (size_t taken = 0; taken < best; ++taken) drafts[order[taken]] = true;
  declined_ += int64_t(n - best);
  return drafts;
}

}  // namespace vt
