#include <gtest/gtest.h>
#include <cmath>

#include <map>
#include <vector>

#include "core/error.h"
#include "ops/sampling/sampler.h"

namespace vt {
namespace {

TEST(Sampler, GreedyTakesFirstMaximum) {
  std::vector<float> logits = {0.1f, 2.0f, 2.0f, -1.0f};
  Sampler sampler({});
  EXPECT_EQ(sampler.sample(logits.data(), 4), 1);
}

TEST(Sampler, SeededSamplingIsReproducible) {
  std::vector<float> logits = {1.0f, 1.5f, 0.5f, 1.2f, 0.0f};
  SamplingParams params{1.0f, 0, 1.0f, 42};
  Sampler a(params), b(params);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(logits.data(), 5), b.sample(logits.data(), 5));
}

TEST(Sampler, TopKAndTopPRestrictTheCandidates) {
  std::vector<float> logits = {5.0f, 4.0f, 0.0f, -1.0f};
  Sampler top_k({1.0f, 2, 1.0f, 7});
  Sampler top_p({1.0f, 0, 0.5f, 7});  // token 0 alone holds ~71% of the mass
  for (int i = 0; i < 200; ++i) {
    EXPECT_LT(top_k.sample(logits.data(), 4), 2);
    EXPECT_EQ(top_p.sample(logits.data(), 4), 0);
  }
}

// vLLM's min_p: tokens less likely than min_p times the most likely one go, then top-p takes its
// mass among those left.
TEST(Sampler, MinPDropsTheUnlikelyBeforeTopP) {
  const std::vector<float> logits = {std::log(8.0f), std::log(4.0f), std::log(2.0f), 0.0f};  // p = 8:4:2:1
  std::vector<float> probs;
  Sampler cut({1.0f, 0, 1.0f, 1, 0.3f});  // 0.3 x 8 = 2.4: 8 and 4 stay
  cut.distribution(logits.data(), 4, probs);
  EXPECT_NEAR(probs[0], 2.0f / 3, 1e-6);
  EXPECT_NEAR(probs[1], 1.0f / 3, 1e-6);
  EXPECT_EQ(probs[2], 0.0f);
  EXPECT_EQ(probs[3], 0.0f);
  Sampler edge({1.0f, 0, 1.0f, 1, 0.24f});  // 0.24 x 8 = 1.92: 2 stays, 1 goes
  edge.distribution(logits.data(), 4, probs);
  EXPECT_NEAR(probs[2], 2.0f / 14, 1e-6);
  EXPECT_EQ(probs[3], 0.0f);
  Sampler with_top_p({1.0f, 0, 0.6f, 1, 0.3f});  // 2/3 of what min_p leaves reaches 0.6
  with_top_p.distribution(logits.data(), 4, probs);
  EXPECT_EQ(probs[0], 1.0f);
  Sampler hot({2.0f, 0, 1.0f, 1, 0.3f});  // after temperature 2: 2.83:2:1.41:1, so 2.83 x 0.3 = 0.85 keeps all
  hot.distribution(logits.data(), 4, probs);
  EXPECT_GT(probs[3], 0.0f);
  for (int i = 0; i < 200; ++i) EXPECT_LT(cut.sample(logits.data(), 4), 2);
}

TEST(Sampler, TemperatureFollowsTheDistribution) {
  std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  Sampler sampler({1.0f, 0, 1.0f, 123});
  int ones = 0;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ones += sampler.sample(logits.data(), 2);
  EXPECT_NEAR(double(ones) / draws, 0.75, 0.015);  // > 4 standard deviations
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_THROW(Sampler({-1.0f, 0, 1.0f, 0}), Error);
  EXPECT_THROW(Sampler({1.0f, 0, 0.0f, 0}), Error);
  EXPECT_THROW(Sampler({NAN, 0, 1.0f, 0}), Error);
  EXPECT_THROW(Sampler({1.0f, 0, 1.0f, 0, 1.5f}), Error);
  EXPECT_THROW(Sampler({1.0f, 0, 1.0f, 0, -0.1f}), Error);
}

}  // namespace
}  // namespace vt
