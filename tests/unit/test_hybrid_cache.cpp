// Admission needs both KV blocks and a state slot; release returns exactly what was taken.
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <set>

#include "cache/hybrid_cache.h"
#include "core/error.h"

namespace vt {
namespace {

TEST(HybridCache, AdmitsOnlyWhenBlocksAndSlotsFit) {
  HybridCache cache(/*num_blocks=*/10, /*block_size=*/16, /*num_slots=*/2);
  EXPECT_TRUE(cache.admit(1, 20, 12));      // 32 tokens: 2 blocks
  EXPECT_EQ(cache.block_table(1).size(), 2u);
  EXPECT_FALSE(cache.admit(2, 100, 60));    // 10 blocks needed, 8 free: refused, nothing taken
  EXPECT_EQ(cache.usage().blocks_used, 2);
  EXPECT_TRUE(cache.admit(3, 1, 0));        // 1 block
  EXPECT_FALSE(cache.admit(4, 1, 0));       // blocks free, but no state slot left
  EXPECT_NE(cache.slot(1), cache.slot(3));
  cache.release(1);
  EXPECT_TRUE(cache.admit(4, 100, 20));     // 8 blocks
  const CacheUsage usage = cache.usage();
  EXPECT_EQ(usage.blocks_used, 9);
  EXPECT_EQ(usage.slots_used, 2);
  EXPECT_EQ(usage.sequences, 2);
}

TEST(HybridCache, ReserveGrowsABlockAtATimeOrTakesNothing) {
  HybridCache cache(/*num_blocks=*/4, /*block_size=*/16, /*num_slots=*/2);
  ASSERT_TRUE(cache.admit(1, 10, 0));  // 1 block
  ASSERT_TRUE(cache.admit(2, 30, 0));  // 2 blocks
  EXPECT_TRUE(cache.reserve(1, 16));   // still one block
  EXPECT_EQ(cache.block_table(1).size(), 1u);
  EXPECT_TRUE(cache.reserve(1, 17));
  EXPECT_EQ(cache.block_table(1).size(), 2u);
  EXPECT_EQ(cache.free_blocks(), 0);
  EXPECT_FALSE(cache.reserve(2, 33));  // needs a third block: none free, nothing taken
  EXPECT_EQ(cache.block_table(2).size(), 2u);
  EXPECT_TRUE(cache.reserve(2, 5));    // never shrinks
  EXPECT_EQ(cache.block_table(2).size(), 2u);
  cache.release(1);
  EXPECT_TRUE(cache.reserve(2, 64));
  EXPECT_EQ(cache.usage().blocks_used, 4);
  EXPECT_THROW(cache.reserve(1, 1), Error);  // released
}

TEST(HybridCache, ErrorsOnMisuse) {
  HybridCache cache(4, 8, 1);
  EXPECT_THROW(cache.release(7), Error);
  ASSERT_TRUE(cache.admit(1, 4, 4));
  EXPECT_THROW(cache.admit(1, 4, 4), Error);  // already admitted
  EXPECT_THROW(cache.admit(2, 0, 4), Error);  // empty prompt
  EXPECT_THROW(cache.block_table(9), Error);
}

TEST(BlockPool, RefCountsKeepSharedBlocksAlive) {
  BlockPool pool(3);
  auto blocks = pool.allocate(2);
  ASSERT_TRUE(blocks);
  pool.retain((*blocks)[0]);
  pool.release((*blocks)[0]);
  EXPECT_EQ(pool.free_count(), 1);  // still owned once
  pool.release((*blocks)[0]);
  pool.release((*blocks)[1]);
  EXPECT_EQ(pool.free_count(), 3);
  EXPECT_THROW(pool.release((*blocks)[1]), Error);  // double free
  EXPECT_FALSE(pool.allocate(4));
}

// A fresh pool hands out blocks in order (a new sequence's rows are one run); a freed block is
// the next one handed out.
TEST(BlockPool, HandsOutFreshBlocksInOrderAndReusesTheLastFreed) {
  BlockPool pool(6);
  EXPECT_EQ(*pool.allocate(3), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(*pool.allocate(1), (std::vector<int32_t>{3}));
  pool.release(1);
  EXPECT_EQ(*pool.allocate(2), (std::vector<int32_t>{1, 4}));
}

// A sequence's tokens over its blocks, adjacent blocks merged into one run of rows.
TEST(RowRuns, MergeAdjacentBlocks) {
  const std::vector<int32_t> blocks = {4, 5, 9, 2, 3};
  const std::vector<RowRun> runs = row_runs(blocks, 4, 18);
  const auto as_tuples = [](const std::vector<RowRun>& list) {
    std::vector<std::array<int64_t, 3>> tuples;
    for (const RowRun& run : list) tuples.push_back({run.first_token, run.first_row, run.count});
    return tuples;
  };
  // Blocks 4 and 5 adjacent, 9 alone, then 2 and the first two tokens of 3.
  EXPECT_EQ(as_tuples(runs), (std::vector<std::array<int64_t, 3>>{{0, 16, 8}, {8, 36, 4}, {12, 8, 6}}));
  EXPECT_TRUE(row_runs(blocks, 4, 0).empty());
  EXPECT_EQ(row_runs(blocks, 4, 3).size(), 1u);
  EXPECT_THROW(row_runs(blocks, 4, 21), Error);  // more tokens than the blocks hold
}

// Random admit/release churn never leaks, never hands one block to two sequences.
TEST(HybridCache, ChurnReturnsEverything) {
  HybridCache cache(64, 16, 8);
  std::mt19937 rng(3);
  std::set<int64_t> live;
  for (int64_t id = 0; id < 2000; ++id) {
    if (!live.empty() && rng() % 3 == 0) {
      auto it = std::next(live.begin(), rng() % live.size());
      cache.release(*it);
      live.erase(it);
    }
    if (cache.admit(id, 1 + rng() % 100, rng() % 100)) live.insert(id);
    std::set<int32_t> owned;
    size_t total = 0;
    for (int64_t seq : live) {
      for (int32_t block : cache.block_table(seq)) owned.insert(block);
      total += cache.block_table(seq).size();
    }
    ASSERT_EQ(owned.size(), total) << "a block is owned twice";
    ASSERT_EQ(cache.usage().blocks_used, int64_t(total));
  }
  for (int64_t seq : live) cache.release(seq);
  EXPECT_EQ(cache.usage().blocks_used, 0);
  EXPECT_EQ(cache.usage().slots_used, 0);
}

}  // namespace
}  // namespace vt
