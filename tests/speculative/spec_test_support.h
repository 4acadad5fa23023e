// Pieces the speculative-decoding tests of the CPU reference and of the CUDA model share: a drafter
// that is wrong at every position in turn, plain greedy decoding, and the statistical check of
// speculative sampling: with sampling (temperature 1, top-k 3) the first three tokens' joint distribution under
// speculation is the target's, for greedy drafts from the target (q a point mass) and sampled ones
// (temperature 1.5, top-k 5: q overlaps p partly and has mass where p has none). The first verify
// step makes tokens 2 and 3 from two drafts (accept, resample or bonus).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "../chi_square.h"
#include "model/generate.h"
#include "ops/sampling/sampler.h"
#include "speculative/draft_model_drafter.h"
#include "speculative/speculative.h"

namespace vt::testing {

// The target's own greedy drafts with the token at position (call % (max_tokens + 1)) made wrong
// (max_tokens: none wrong), so verification accepts every prefix length in turn.
class SometimesWrongDrafter final : public Drafter {
 public:
  explicit SometimesWrongDrafter(Model& target) : oracle_(target, {}), vocab_(target.info().vocab_size) {}
  std::string name() const override { return "sometimes-wrong"; }
  void start(std::span<const int32_t> prompt, int64_t max_length) override { oracle_.start(prompt, max_length); }
  void propose(std::span<const int32_t> context, int64_t max_tokens, Draft& draft) override {
    oracle_.propose(context, max_tokens, draft);
    const size_t wrong = size_t(calls_++ % (max_tokens + 1));
    if (wrong < draft.tokens.size()) draft.tokens[wrong] = int32_t((draft.tokens[wrong] + 1) % vocab_);
  }

 private:
  DraftModelDrafter oracle_;
  int64_t vocab_, calls_ = 0;
};

inline std::vector<int32_t> plain_greedy(Model& model, const std::vector<int32_t>& prompt, int64_t count) {
  GenerateOptions options;
  options.max_new_tokens = count;
  return generate(model, prompt, options).output_ids;
}

// The sampling these checks use: temperature 1, top-k 3 (27 possible first three tokens).
inline SamplingParams three_token_sampling() { return {1.0f, 3, 1.0f, 0}; }

// Exact joint probabilities of the first three tokens the target samples after `prompt`.
inline std::map<std::vector<int32_t>, double> first_three_token_distribution(Model& target,
                                                                            const std::vector<int32_t>& prompt) {
  const int64_t vocab = target.info().vocab_size;
  std::map<std::vector<int32_t>, double> expected;
  Sampler exact(three_token_sampling());
  std::vector<float> p;
  const auto distribution_after = [&](const std::vector<int32_t>& tokens) {
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), tokens.begin(), tokens.end());
    auto state = target.new_sequence(int64_t(all.size()));
    Buffer logits(DType::kF32, {1, vocab});
    target.forward(all, *state, logits, {});
    exact.distribution(logits.f32(), vocab, p);
    return p;
  };
  const auto p1 = distribution_after({});
  for (int32_t a = 0; a < vocab; ++a) {
    if (p1[a] == 0) continue;
    const auto p2 = distribution_after({a});
    for (int32_t b = 0; b < vocab; ++b) {
      if (p2[b] == 0) continue;
      const auto p3 = distribution_after({a, b});
      for (int32_t c = 0; c < vocab; ++c)
        if (p3[c] > 0) expected[{a, b, c}] = double(p1[a]) * p2[b] * p3[c];
    }
  }
  return expected;
}

// The observed first-three-token counts of `samples` sampled outputs pass a chi-square test
// against `expected` at the 0.999 quantile (Wilson-Hilferty) with cells - 1 degrees of freedom.
inline void expect_chi_square_passes(const std::map<std::vector<int32_t>, int64_t>& observed,
                                     const std::map<std::vector<int32_t>, double>& expected, int64_t samples,
                                     int64_t accepted, int64_t drafted, const std::string& name) {
  int64_t cells = 0;
  const double statistic = chi_square(observed, expected, samples, &cells);
  const double bound = chi_square_bound(cells);
  std::printf("%s: chi-square %.1f over %lld cells (bound %.1f), drafts accepted %lld of %lld\n", name.c_str(),
              statistic, (long long)cells, bound, (long long)accepted, (long long)drafted);
  EXPECT_LT(statistic, bound) << name;
  // Drafts were both accepted and rejected, so both branches shaped the counts.
  EXPECT_GT(accepted, drafted / 10) << name;
  EXPECT_LT(accepted, drafted * 9 / 10) << name;
}

// `label` names the backend in the printed lines and failures.
inline void expect_speculative_sampling_follows_target(Model& target, const std::vector<int32_t>& prompt,
                                                       const std::string& label) {
  const SamplingParams sampling = three_token_sampling();
  const auto expected = first_three_token_distribution(target, prompt);
  ASSERT_EQ(expected.size(), 27u);
  for (const SamplingParams& draft_sampling : {SamplingParams{}, SamplingParams{1.5f, 5, 1.0f, 99}}) {
    const std::string name = label + (draft_sampling.temperature == 0 ? " point-mass q" : " dense q");
    const int64_t samples = 2000;
    std::map<std::vector<int32_t>, int64_t> observed;
    int64_t drafted = 0, accepted = 0;
    DraftModelDrafter drafter(target, draft_sampling);
    for (int64_t seed = 0; seed < samples; ++seed) {
      GenerateOptions options;
      options.max_new_tokens = 4;  // the first step then drafts 2 tokens; the 4th is not counted
      options.sampling = sampling;
      options.sampling.seed = uint64_t(seed);
      SpeculativeOptions speculative;
      speculative.num_draft = 2;
      auto result = generate_speculative(target, drafter, prompt, options, speculative);
      ASSERT_EQ(result.output_ids.size(), 4u);
      ++observed[{result.output_ids.begin(), result.output_ids.begin() + 3}];
      drafted += result.stats.drafted, accepted += result.stats.accepted;
    }
    expect_chi_square_passes(observed, expected, samples, accepted, drafted, name);
  }
}

}  // namespace vt::testing
