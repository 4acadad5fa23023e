// The host side of device sampling: the Philox4x32-10 generator against Random123's known answers,
// the order key, the Gumbel variate's range and mean, the fixed-point nucleus target, and the
// kernel's CPU twin (cpu::sample_rows) against the host Sampler: greedy rows are its argmax,
// sampled rows follow Sampler::distribution (chi-square) and never leave its support, also where
// the top-k / top-p boundary falls inside ties; draws are fixed by seed and counter.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../sampling_test_support.h"
#include "ops/sampling/device_sampling.h"
#include "ops/sampling/sampling.h"

namespace vt {
namespace {

using sampling::Words;
using testing::logit_shape_name;
using testing::LogitShape;

std::vector<int32_t> twin(const std::vector<float>& logits, int64_t vocab, const std::vector<SampleRowParams>& params) {
  std::vector<int32_t> tokens(params.size());
  cpu::sample_rows(tokens.data(), logits.data(), vocab, params.data(), int64_t(params.size()));
  return tokens;
}

void expect_words(const Words& got, const Words& want) {
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.w[i], want.w[i]) << "word " << i;
}

// Random123's kat_vectors for philox4x32 with 10 rounds.
TEST(DeviceSampling, PhiloxMatchesKnownAnswers) {
  expect_words(sampling::philox4x32_10(Words{{0, 0, 0, 0}}, 0, 0),
               Words{{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
  expect_words(sampling::philox4x32_10(Words{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu,
                                       0xffffffffu),
               Words{{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
  expect_words(sampling::philox4x32_10(Words{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u,
                                       0x299f31d0u),
               Words{{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
  // The element words put the group in the low counter words and the draw counter in the high ones.
  expect_words(sampling::element_words(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull),
               Words{{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST(DeviceSampling, OrderKeyFollowsTheFloatOrder) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> ascending = {-inf, -3e38f, -2.5f, -1.0f, -1e-30f, -1e-45f, 0.0f,
                                        1e-45f, 1e-30f, 1.0f,  1.0000001f, 2.5f, 3e38f, inf};
  for (size_t i = 0; i + 1 < ascending.size(); ++i)
    EXPECT_LT(sampling::order_key(ascending[i]), sampling::order_key(ascending[i + 1])) << ascending[i];
  for (float value : ascending) EXPECT_EQ(sampling::key_value(sampling::order_key(value)), value);
  // -0 and +0 tie, as they compare equal on the host.
  EXPECT_EQ(sampling::order_key(sampling::scaled_logit(-0.0f, 1.0f)), sampling::order_key(0.0f));
  EXPECT_EQ(sampling::scaled_logit(3.0f, 0.7f), 3.0f / 0.7f);
}

TEST(DeviceSampling, GumbelIsFiniteAndHasTheRightMean) {
  for (uint32_t word : {0u, 1u, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu}) {
    const float g = sampling::gumbel(word);
    EXPECT_TRUE(std::isfinite(g)) << word;
    EXPECT_GT(g, -3.2f) << word;
    EXPECT_LT(g, 23.0f) << word;
  }
  EXPECT_GT(sampling::gumbel(0xffffffffu), 22.0f);  // the far tail is reachable
  // Mean: the Euler-Mascheroni constant; variance pi^2 / 6.
  double sum = 0, squares = 0;
  const int64_t groups = 50000;
  for (int64_t group = 0; group < groups; ++group) {
    const Words words = sampling::element_words(42, 7, uint64_t(group));
    for (uint32_t word : words.w) {
      const double g = sampling::gumbel(word);
      sum += g, squares += g * g;
    }
  }
  const double count = 4.0 * double(groups), mean = sum / count, variance = squares / count - mean * mean;
  EXPECT_NEAR(mean, 0.5772157, 0.01);
  EXPECT_NEAR(variance, 3.14159265358979 * 3.14159265358979 / 6, 0.03);
}

TEST(DeviceSampling, NucleusTargetAndFixedMass) {
  EXPECT_EQ(sampling::fixed_mass(1.5f, 1.5f), uint64_t(1) << sampling::kMassFractionBits);
  EXPECT_EQ(sampling::fixed_mass(-std::numeric_limits<float>::infinity(), 0.0f), 0u);
  EXPECT_EQ(sampling::mass_target(1.0f, 1000), 1000u);
  EXPECT_EQ(sampling::mass_target(0.5f, 1000), 500u);
  EXPECT_EQ(sampling::mass_target(0.5f, 1001), 501u);    // the crossing token is in
  EXPECT_EQ(sampling::mass_target(1e-30f, 1000), 1u);    // at least one token
  EXPECT_EQ(sampling::sample_row_passes({0, 0, 0.0f, 0.5f, 40, 0}, 1000), 1);
  EXPECT_EQ(sampling::sample_row_passes({0, 0, 1.0f, 1.0f, 0, 0}, 1000), 1);
  EXPECT_EQ(sampling::sample_row_passes({0, 0, 1.0f, 0.9f, 40, 0}, 1000), 8);
}

TEST(DeviceSampling, TwinGreedyRowsAreTheArgmax) {
  for (LogitShape shape : {LogitShape::kNormal, LogitShape::kLevels}) {
    const auto logits = testing::random_logits(6, 1000, 1, shape);
    testing::expect_greedy_rows_are_argmax(twin, logits, 1000, logit_shape_name(shape));
  }
  // Ties go to the lowest id.
  std::vector<float> tied(100, 0.0f);
  tied[40] = tied[60] = tied[41] = 2.0f;
  testing::expect_greedy_rows_are_argmax(twin, tied, 100, "tied");
}

TEST(DeviceSampling, TwinFollowsTheSamplerDistribution) {
  const int64_t draws = 6000;
  for (int64_t vocab : {1000, 4099}) {
    for (LogitShape shape : {LogitShape::kNormal, LogitShape::kCoarse, LogitShape::kLevels}) {
      const auto logits = testing::random_logits(2, vocab, uint64_t(vocab) + int(shape), shape);
      for (const auto& [name, sampling] : testing::sampled_cases()) {
        if (shape != LogitShape::kNormal && sampling.top_k == 0 && sampling.top_p == 1.0f) continue;
        const std::string label = std::string("twin ") + name + ", vocab " + std::to_string(vocab) + ", " +
                                  logit_shape_name(shape);
        testing::expect_draws_follow_sampler(twin, logits, vocab, 1, sampling, draws, label);
      }
    }
  }
}

// Boundaries inside ties take the lower ids, as the Sampler's order does: top-k 3 of five tied
// leaders is ids 0..2 only; top-p whose mass needs two of four tied leaders is ids 0 and 1; top-k
// 4 of ten tied leaders with a top-p that needs all four is ids 0..3 (not the whole tie).
TEST(DeviceSampling, TwinSplitsTiedBoundariesById) {
  std::vector<float> logits(64, -4.0f);
  for (int i = 0; i < 5; ++i) logits[size_t(10 * i)] = 3.0f;  // ids 0, 10, 20, 30, 40
  const auto tokens = testing::expect_draws_follow_sampler(twin, logits, 64, 0, {1.0f, 3, 1.0f, 5}, 3000, "top-k tie");
  for (int32_t token : tokens) EXPECT_TRUE(token == 0 || token == 10 || token == 20) << token;
  std::vector<float> four(64, -30.0f);
  for (int i = 0; i < 4; ++i) four[size_t(i + 7)] = 1.0f;  // ids 7..10 share ~all the mass
  const auto nucleus = testing::expect_draws_follow_sampler(twin, four, 64, 0, {1.0f, 0, 0.4f, 6}, 3000, "top-p tie");
  for (int32_t token : nucleus) EXPECT_TRUE(token == 7 || token == 8) << token;
  std::vector<float> ten(64, -30.0f);
  for (int i = 0; i < 10; ++i) ten[size_t(3 * i)] = 2.0f;  // ids 0, 3, ..., 27
  const auto both = testing::expect_draws_follow_sampler(twin, ten, 64, 0, {1.0f, 4, 0.99f, 7}, 3000, "top-k+p tie");
  for (int32_t token : both) EXPECT_TRUE(token == 0 || token == 3 || token == 6 || token == 9) << token;
}

TEST(DeviceSampling, TwinDrawsAreFixedBySeedAndCounter) {
  const auto logits = testing::random_logits(3, 1000, 9, LogitShape::kNormal);
  testing::expect_same_seed_same_tokens(twin, logits, 1000, "twin");
  // The row's position in the batch does not matter: the same row twice gives the same token.
  std::vector<float> doubled = logits;
  doubled.insert(doubled.end(), logits.begin(), logits.begin() + 1000);
  const SampleRowParams first = sample_row_params({1.0f, 0, 0.9f, 77}, 5, 0, 1000);
  SampleRowParams copy = first;
  copy.row = 3;
  const auto tokens = twin(doubled, 1000, {first, copy});
  EXPECT_EQ(tokens[0], tokens[1]);
}

}  // namespace
}  // namespace vt
