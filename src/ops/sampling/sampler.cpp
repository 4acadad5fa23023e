#include "ops/sampling/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace vt {

int32_t argmax(const float* values, int64_t count) {
  int64_t best = 0;
  for (int64_t i = 1; i < count; ++i)
    if (values[i] > values[best]) best = i;
  return int32_t(best);
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { check_sampling_params(params); }

int64_t Sampler::nucleus(const float* logits, int64_t vocab, double* nucleus_total) {
  candidates_.resize(vocab);
  for (int64_t i = 0; i < vocab; ++i) candidates_[i] = {logits[i] / params_.temperature, int32_t(i)};
  // Highest first, ties by lower id, so the result depends only on the logits and the seed.
  auto higher = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  int64_t keep = params_.top_k > 0 ? std::min<int64_t>(params_.top_k, vocab) : vocab;
  std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), higher);
  candidates_.resize(keep);
  const float max_logit = candidates_[0].first;
  double total = 0;
  probs_.resize(keep);
  for (int64_t i = 0; i < keep; ++i) total += probs_[i] = std::exp(double(candidates_[i].first - max_logit));
  // min_p: probs_[i] is p_i / p_max, so the survivors are a prefix (the most likely one stays).
  if (params_.min_p > 0.0f) {
    int64_t kept = 1;
    while (kept < keep && probs_[kept] >= double(params_.min_p)) ++kept;
    keep = kept;
    candidates_.resize(keep);
    probs_.resize(keep);
    total = 0;
    for (int64_t i = 0; i < keep; ++i) total += probs_[i];
  }
  // Nucleus: the smallest prefix whose mass reaches top_p (always at least one token).
  int64_t nucleus = keep;
  if (params_.top_p < 1.0f) {
    double mass = 0;
    for (int64_t i = 0; i < keep; ++i) {
      mass += probs_[i] / total;
      if (mass >= params_.top_p) {
        nucleus = i + 1;
        break;
      }
    }
  }
  *nucleus_total = 0;
  for (int64_t i = 0; i < nucleus; ++i) *nucleus_total += probs_[i];
  return nucleus;
}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  if (greedy()) return argmax(logits, vocab);
  double nucleus_total = 0;
  const int64_t count = nucleus(logits, vocab, &nucleus_total);
  double draw = std::uniform_real_distribution<double>(0.0, nucleus_total)(rng_);
  for (int64_t i = 0; i < count; ++i) {
    draw -= probs_[i];
    if (draw < 0) return candidates_[i].second;
  }
  return candidates_[count - 1].second;
}

void Sampler::distribution(const float* logits, int64_t vocab, std::vector<float>& probs) {
  probs.assign(vocab, 0.0f);
  if (greedy()) {
    probs[argmax(logits, vocab)] = 1.0f;
    return;
  }
  double nucleus_total = 0;
  const int64_t count = nucleus(logits, vocab, &nucleus_total);
  for (int64_t i = 0; i < count; ++i) probs[candidates_[i].second] = float(probs_[i] / nucleus_total);
}

int32_t Sampler::draw(const std::vector<float>& weights) {
  double total = 0;
  for (float w : weights) total += w;
  VT_CHECK(total > 0, "Sampler::draw: the weights sum to ", total);
  double draw = std::uniform_real_distribution<double>(0.0, total)(rng_);
  int32_t last = 0;  // rounding can leave draw >= 0 after the loop: take the last nonzero weight
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    last = int32_t(i);
    draw -= weights[i];
    if (draw < 0) return last;
  }
  return last;
}

double Sampler::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

}  // namespace vt
