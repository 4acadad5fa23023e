// The prompt-lookup drafter: which suffix it matches, where, and what it proposes.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "speculative/ngram_drafter.h"

namespace vt {
namespace {

std::vector<int32_t> propose(NgramDrafter& drafter, const std::vector<int32_t>& context,
                             int64_t max_tokens) {
  Draft draft;
  drafter.propose(context, max_tokens, draft);
  EXPECT_TRUE(draft.probs.empty()) << "n-gram drafts are deterministic";
  return draft.tokens;
}

TEST(NgramDrafter, ProposesWhatFollowedTheSuffixEarlier) {
  NgramDrafter drafter({2, 3});
  // suffix [1 2 3] occurs at 0; continuation runs on into the suffix itself
  EXPECT_EQ(propose(drafter, {1, 2, 3, 4, 5, 9, 1, 2, 3}, 4), (std::vector<int32_t>{4, 5, 9, 1}));
  EXPECT_EQ(propose(drafter, {1, 2, 3, 4, 5, 9, 1, 2, 3}, 10),
            (std::vector<int32_t>{4, 5, 9, 1, 2, 3}));
  EXPECT_EQ(propose(drafter, {1, 2, 3, 4, 5, 9, 1, 2, 3}, 1), (std::vector<int32_t>{4}));
}

TEST(NgramDrafter, LongestSuffixFirstThenMostRecentOccurrence) {
  NgramDrafter drafter({1, 3});
  // [7 8 9] occurs once early (-> 1); [8 9] also occurs later (-> 2): the longer match wins.
  EXPECT_EQ(propose(drafter, {7, 8, 9, 1, 0, 8, 9, 2, 0, 7, 8, 9}, 1), (std::vector<int32_t>{1}));
  // Only [8 9] matches, twice: the most recent occurrence (-> 2) wins.
  EXPECT_EQ(propose(drafter, {5, 8, 9, 1, 0, 8, 9, 2, 0, 6, 8, 9}, 2),
            (std::vector<int32_t>{2, 0}));
  // Only the 1-gram [9] matches.
  EXPECT_EQ(propose(drafter, {9, 4, 0, 6, 9}, 3), (std::vector<int32_t>{4, 0, 6}));
}

TEST(NgramDrafter, NothingBelowMinN) {
  NgramDrafter drafter({2, 4});
  EXPECT_TRUE(propose(drafter, {9, 4, 0, 6, 9}, 3).empty());  // only a 1-gram would match
  EXPECT_TRUE(propose(drafter, {1, 2, 3}, 3).empty());
  EXPECT_TRUE(propose(drafter, {5}, 3).empty());
  EXPECT_TRUE(propose(drafter, {5, 5}, 3).empty());  // [5 5] has no earlier occurrence
  EXPECT_EQ(propose(drafter, {5, 5, 5}, 3), (std::vector<int32_t>{5}));  // [5 5] at 0, then 5
}

TEST(NgramDrafter, RejectsBadOptions) {
  EXPECT_THROW(NgramDrafter({0, 2}), Error);
  EXPECT_THROW(NgramDrafter({3, 2}), Error);
}

}  // namespace
}  // namespace vt
