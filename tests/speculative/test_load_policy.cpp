// Speculation by load (SpeculationLoadPolicy): from measured step costs and acceptances, drafts
// where they make more tokens per second and not where they do not; exploration keeps both sides
// measured; an unmeasured token count reads as the nearest measured one.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "speculative/load_policy.h"

namespace vt {
namespace {

using Candidate = SpeculationLoadPolicy::Candidate;

// A policy that has measured every token count up to `max_tokens` at cost(tokens).
SpeculationLoadPolicy measured(int64_t max_tokens, const std::function<double(int64_t)>& cost) {
  SpeculationLoadPolicy policy(max_tokens);
  for (int64_t tokens = 1; tokens <= max_tokens; ++tokens) policy.observe_step(tokens, cost(tokens));
  return policy;
}

int64_t count(const std::vector<bool>& drafts) { return int64_t(std::count(drafts.begin(), drafts.end(), true)); }

TEST(SpeculationLoadPolicy, FlatCostDraftsComputeBoundCostDoesNot) {
  // Reading the weights dominates: 64 tokens cost what 1 does.
  SpeculationLoadPolicy flat = measured(512, [](int64_t) { return 0.010; });
  const std::vector<Candidate> four(4, Candidate{4, 1.5});
  EXPECT_EQ(count(flat.choose(0, 0.0, four)), 4);
  // Compute dominates: a step's cost grows with its tokens, so 4 drafts that give 1.5 tokens cost
  // more than they give.
  SpeculationLoadPolicy linear = measured(512, [](int64_t tokens) { return 0.001 * double(tokens); });
  EXPECT_EQ(count(linear.choose(0, 0.0, four)), 0);
  EXPECT_EQ(linear.declined(), 4);
}

TEST(SpeculationLoadPolicy, TheBatchDecidesAndTheBestAcceptanceDraftsFirst) {
  // A GPU-like step: flat to 64 tokens, then proportional to the tokens.
  const auto cost = [](int64_t tokens) { return 0.010 * std::max(1.0, double(tokens) / 64.0); };
  SpeculationLoadPolicy policy = measured(1024, cost);
  // Batch 8 with 4 drafts each: 40 tokens, flat: all draft.
  EXPECT_EQ(count(policy.choose(0, 0.0, std::vector<Candidate>(8, Candidate{4, 1.0}))), 8);
  // Batch 64 with 4 drafts each: 320 tokens cost 5x the 64 of plain decode for 2x the tokens.
  EXPECT_EQ(count(policy.choose(0, 0.0, std::vector<Candidate>(64, Candidate{4, 1.0}))), 0);
  // Batch 32: the sequences that accept most fill the flat part; those that accept little do not.
  std::vector<Candidate> mixed;
  for (int i = 0; i < 32; ++i) mixed.push_back({4, i % 4 == 0 ? 3.8 : 0.2});
  const std::vector<bool> drafts = policy.choose(0, 0.0, mixed);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(drafts[size_t(i)], i % 4 == 0) << "sequence " << i;
  // Fixed tokens (plain decodes beside them) take the flat part: 60 plain decodes leave no room.
  EXPECT_EQ(count(policy.choose(60, 60.0, std::vector<Candidate>(4, Candidate{4, 1.0}))), 0);
}

TEST(SpeculationLoadPolicy, ExploresTheOtherChoiceEverySoOften) {
  SpeculationLoadPolicy linear = measured(64, [](int64_t tokens) { return 0.001 * double(tokens); });
  const std::vector<Candidate> two(2, Candidate{2, 1.0});
  int64_t explored = 0;
  for (int64_t decision = 1; decision <= 4 * SpeculationLoadPolicy::kExploreEvery; ++decision)
    explored += count(linear.choose(0, 0.0, two)) == 2;
  EXPECT_EQ(explored, 4);
  EXPECT_EQ(linear.decisions(), 4 * SpeculationLoadPolicy::kExploreEvery);
}

TEST(SpeculationLoadPolicy, UnmeasuredCountsReadAsTheNearestMeasured) {
  SpeculationLoadPolicy policy(100);
  EXPECT_EQ(policy.cost(10), 1.0);  // nothing measured
  policy.observe_step(4, 0.004);
  policy.observe_step(40, 0.040);
  EXPECT_EQ(policy.cost(1), 0.004);
  EXPECT_EQ(policy.cost(20), 0.004);   // nearer 4 than 40
  EXPECT_EQ(policy.cost(30), 0.040);
  EXPECT_EQ(policy.cost(500), 0.040);  // beyond the budget: the largest
  // A moving average: a new step moves it a quarter of the way.
  policy.observe_step(4, 0.008);
  EXPECT_DOUBLE_EQ(policy.cost(4), 0.005);
  // Untracked or empty steps are ignored.
  policy.observe_step(0, 1.0);
  policy.observe_step(101, 1.0);
  EXPECT_EQ(policy.cost(100), 0.040);
}

}  // namespace
}  // namespace vt
