// Token sampling on the host: greedy, temperature, min-p, top-k, top-p, seeded.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "ops/sampling/params.h"  // SamplingParams

namespace vt {

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // Picks a token from logits [vocab]. Greedy ties go to the lowest id (as torch.argmax).
  int32_t sample(const float* logits, int64_t vocab);

  // For speculative decoding's rejection sampling, with the same generator:
  bool greedy() const { return params_.temperature == 0.0f || params_.top_k == 1; }
  // The distribution sample() draws from, dense: probs [vocab] sums to 1, zero outside top-k and
  // the nucleus; a point mass at the argmax when greedy.
  void distribution(const float* logits, int64_t vocab, std::vector<float>& probs);
  // Draws an index with probability weights[i] / sum(weights) (weights >= 0, sum > 0).
  int32_t draw(const std::vector<float>& weights);
  double uniform();  // in [0, 1)

 private:
  // Sorts the candidates by logit, highest first; returns how many form the nucleus and fills
  // probs_ with their unnormalised probabilities (total in *nucleus_total).
  int64_t nucleus(const float* logits, int64_t vocab, double* nucleus_total);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
  std::vector<double> probs_;
};

int32_t argmax(const float* values, int64_t count);

}  // namespace vt
