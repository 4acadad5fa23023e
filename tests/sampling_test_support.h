// Checks of token sampling on the device, shared by the CPU twin's tests
// (unit/test_device_sampling.cpp) and the CUDA kernel's (cuda/test_cuda_sampling.cpp): greedy and
// top-k 1 rows give the host argmax; sampled rows never leave the host Sampler's support and
// follow Sampler::distribution (chi-square over draws with counters 0, 1, 2, ...), also where the
// top-k and top-p boundaries fall inside ties; the same seed and counter give the same token.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "chi_square.h"
#include "ops/sampling/params.h"
#include "ops/sampling/sampler.h"

namespace vt::testing {

// tokens[i] drawn for params[i] from logits [rows, vocab] (the kernel, or its CPU twin).
using SampleRowsFn = std::function<std::vector<int32_t>(const std::vector<float>& logits, int64_t vocab,
                                                        const std::vector<SampleRowParams>& params)>;

// How random logits look: kNormal N(0, 2^2) (few ties); kCoarse the same rounded to multiples of
// 0.5 (top-k / top-p boundaries inside ties); kLevels N(0, 1) rounded to integers (a handful of
// values shared by hundreds of ids).
enum class LogitShape { kNormal, kCoarse, kLevels };
inline const char* logit_shape_name(LogitShape shape) {
  return shape == LogitShape::kNormal ? "normal" : shape == LogitShape::kCoarse ? "coarse" : "levels";
}

inline std::vector<float> random_logits(int64_t rows, int64_t vocab, uint64_t seed, LogitShape shape) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, shape == LogitShape::kLevels ? 1.0f : 2.0f);
  std::vector<float> logits(size_t(rows * vocab));
  for (float& value : logits) {
    value = normal(rng);
    if (shape == LogitShape::kCoarse) value = std::round(value * 2.0f) / 2.0f;
    if (shape == LogitShape::kLevels) value = std::round(value);
  }
  return logits;
}

struct SamplingCase {
  const char* name;
  SamplingParams sampling;
};
// Temperature alone, top-k, top-p and both, with seeds.
inline std::vector<SamplingCase> sampled_cases() {
  return {{"temperature 1", {1.0f, 0, 1.0f, 11}},
          {"temperature 0.6", {0.6f, 0, 1.0f, 12}},
          {"top-k 40", {1.0f, 40, 1.0f, 13}},
          {"top-k 2", {1.0f, 2, 1.0f, 14}},
          {"top-p 0.9", {1.0f, 0, 0.9f, 15}},
          {"top-p 0.3 temperature 1.5", {1.5f, 0, 0.3f, 16}},
          {"top-k 50 top-p 0.8 temperature 0.7", {0.7f, 50, 0.8f, 17}},
          {"top-k 3 top-p 0.99", {1.0f, 3, 0.99f, 18}}};  // the nucleus often ends at top-k's boundary
}

// Every row's greedy and top-k 1 draws (several seeds and counters) are the host argmax.
inline void expect_greedy_rows_are_argmax(const SampleRowsFn& sample, const std::vector<float>& logits, int64_t vocab,
                                          const std::string& label) {
  const int64_t rows = int64_t(logits.size()) / vocab;
  std::vector<SampleRowParams> params;
  for (int64_t row = 0; row < rows; ++row)
    for (const SamplingParams& sampling : {SamplingParams{0.0f, 0, 1.0f, 1}, SamplingParams{0.8f, 1, 1.0f, 2},
                                           SamplingParams{0.0f, 40, 0.5f, 3}})
      for (uint64_t counter : {0u, 7u}) params.push_back(sample_row_params(sampling, counter, row, vocab));
  const std::vector<int32_t> tokens = sample(logits, vocab, params);
  ASSERT_EQ(tokens.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_EQ(tokens[i], argmax(logits.data() + params[i].row * vocab, vocab))
        << label << ": row " << params[i].row << " draw " << i;
}

// `draws` draws from row `row` with `sampling` (counters 0 .. draws - 1): none outside
// Sampler::distribution's support, and their counts pass its chi-square test at the 1 - 1e-5
// quantile (the tests make about fifty such checks: at 0.999 a fair sampler's fixed draws would
// fail one of them with probability ~5%).
// Returns the tokens.
inline std::vector<int32_t> expect_draws_follow_sampler(const SampleRowsFn& sample, const std::vector<float>& logits,
                                                        int64_t vocab, int64_t row, const SamplingParams& sampling,
                                                        int64_t draws, const std::string& name) {
  std::vector<SampleRowParams> params;
  for (int64_t i = 0; i < draws; ++i) params.push_back(sample_row_params(sampling, uint64_t(i), row, vocab));
  const std::vector<int32_t> tokens = sample(logits, vocab, params);
  EXPECT_EQ(int64_t(tokens.size()), draws) << name;
  std::vector<float> probabilities;
  Sampler(sampling).distribution(logits.data() + row * vocab, vocab, probabilities);
  std::map<std::vector<int32_t>, double> expected;
  for (int32_t id = 0; id < vocab; ++id)
    if (probabilities[id] > 0) expected[{id}] = probabilities[id];
  std::map<std::vector<int32_t>, int64_t> observed;
  int64_t outside = 0;
  for (int32_t token : tokens) {
    if (token < 0 || token >= vocab || probabilities[token] == 0) {
      ++outside;
      continue;
    }
    ++observed[{token}];
  }
  EXPECT_EQ(outside, 0) << name << ": draws outside the Sampler's support";
  int64_t cells = 0;
  const double statistic = chi_square(observed, expected, draws, &cells);
  if (cells < 2) {  // one token holds (nearly) all the mass: the support check is the test
    std::printf("%s: %zu candidates, %lld cell\n", name.c_str(), expected.size(), (long long)cells);
    return tokens;
  }
  const double bound = chi_square_bound(cells, kChiSquareZManyChecks);
  std::printf("%s: %zu candidates, chi-square %.1f over %lld cells (bound %.1f)\n", name.c_str(), expected.size(),
              statistic, (long long)cells, bound);
  EXPECT_LT(statistic, bound) << name;
  return tokens;
}

// Rows of every kind of setting: the same seeds and counters give the same tokens (two calls);
// other seeds give other tokens for most sampled rows.
inline void expect_same_seed_same_tokens(const SampleRowsFn& sample, const std::vector<float>& logits, int64_t vocab,
                                         const std::string& label) {
  const int64_t rows = int64_t(logits.size()) / vocab;
  std::vector<SampleRowParams> params, reseeded;
  for (int64_t row = 0; row < rows; ++row)
    for (const SamplingCase& c : sampled_cases())
      for (uint64_t counter = 0; counter < 8; ++counter) {
        params.push_back(sample_row_params(c.sampling, counter, row, vocab));
        SamplingParams other = c.sampling;
        other.seed += 1000;
        reseeded.push_back(sample_row_params(other, counter, row, vocab));
      }
  const std::vector<int32_t> first = sample(logits, vocab, params);
  EXPECT_EQ(sample(logits, vocab, params), first) << label;
  const std::vector<int32_t> other = sample(logits, vocab, reseeded);
  int64_t differ = 0;
  for (size_t i = 0; i < first.size(); ++i) differ += first[i] != other[i];
  EXPECT_GT(differ, int64_t(first.size()) / 4)
      << label << ": another seed changed " << differ << " of " << first.size();
}

}  // namespace vt::testing
