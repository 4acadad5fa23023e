// Prefix caching on the tiny golden Qwen3.5 model (Gated DeltaNet + gated attention): the cache's
// lookup (longest saved prefix, tokens checked, LRU under a byte budget), and through the engine a
// conversation's later turns start from the earlier turns' saved states (the end of the prompt
// and of the completion, and every stride of a long shared prompt) and give the same greedy
// tokens, with logprobs within the chunk split's rounding, as with the cache off; also through
// preemption, speculative decoding and eviction.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <random>

#include "cache/hybrid_cache.h"
#include "cache/prefix_cache.h"
#include "engine/engine.h"
#include "model/host_snapshot.h"
#include "models/registry.h"

namespace vt {
namespace {

const std::string kModelDir = std::string(VT_SOURCE_DIR) + "/tests/golden/qwen3_5_dense";

std::unique_ptr<StateSnapshot> snapshot_of(int64_t length, int64_t floats) {
  auto snapshot = std::make_unique<HostSnapshot>(length);
  const std::vector<float> data(static_cast<size_t>(floats), float(length));
  snapshot->save(data.data(), floats);
  return snapshot;
}

// Fresh blocks of `pool` for `tokens` tokens (what a saved state holds).
std::vector<int32_t> blocks_of(HybridCache& pool, int64_t tokens) { return *pool.allocate_blocks(pool.blocks_for(tokens)); }

TEST(PrefixCache, FindsTheLongestSavedPrefixAndEvictsTheLeastRecentlyUsed) {
  HybridCache pool(64, 4, 1);
  {
    PrefixCache cache(3 * 100 * 4, pool, 0);  // three snapshots of 100 floats
    const std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 10, 11, 12};
    const std::span<const int32_t> all(tokens);
    EXPECT_FALSE(cache.find(all, 8).snapshot);
    cache.insert(all.first(2), snapshot_of(2, 100), blocks_of(pool, 2));
    cache.insert(all.first(5), snapshot_of(5, 100), blocks_of(pool, 5));
    EXPECT_EQ(cache.find(all, 8).length, 5);
    EXPECT_EQ(cache.find(all, 8).blocks.size(), 2u);
    EXPECT_EQ(cache.find(all, 4).length, 2);  // a limit below the longest
    const std::vector<int32_t> other = {5, 6, 99, 8, 9};
    EXPECT_EQ(cache.find(other, 5).length, 2);  // diverges after two tokens
    EXPECT_FALSE(cache.find(std::vector<int32_t>{6, 5, 7}, 3).snapshot);
    cache.insert(all.first(7), snapshot_of(7, 100), blocks_of(pool, 7));
    EXPECT_EQ(cache.bytes(), 1200);
    EXPECT_TRUE(cache.touch(all.first(2)));  // 5 is now the least recently used
    cache.insert(all.first(8), snapshot_of(8, 100), blocks_of(pool, 8));
    EXPECT_EQ(cache.evictions(), 1);
    EXPECT_EQ(cache.entries(), 3);
    EXPECT_FALSE(cache.touch(all.first(5)));
    EXPECT_EQ(cache.find(all, 6).length, 2);
    EXPECT_EQ(cache.find(all, 8).length, 8);
    cache.insert(all.first(8), snapshot_of(8, 100), blocks_of(pool, 8));  // saved already: the blocks go back
    EXPECT_EQ(pool.free_blocks(), 64 - 1 - 2 - 2);
    PrefixCache small(100, pool, 0);
    small.insert(all.first(3), snapshot_of(3, 100), blocks_of(pool, 3));  // larger than the whole budget: not kept
    EXPECT_EQ(small.entries(), 0);
    // Nor does one larger than the budget evict the entries that fit: a 400-byte snapshot over one
    // 1000-byte block stays; one over two blocks (2,400 bytes) goes alone and its blocks go back.
    PrefixCache tight(1500, pool, 1000);
    tight.insert(all.first(2), snapshot_of(2, 100), blocks_of(pool, 2));
    EXPECT_EQ(tight.bytes(), 1400);
    const int64_t free_before = pool.free_blocks();
    tight.insert(all.first(8), snapshot_of(8, 100), blocks_of(pool, 8));
    EXPECT_EQ(tight.entries(), 1);
    EXPECT_EQ(tight.evictions(), 1);
    EXPECT_EQ(tight.find(all, 8).length, 2);
    EXPECT_EQ(pool.free_blocks(), free_before);
  }
  EXPECT_EQ(pool.free_blocks(), 64);  // the entries' blocks went back with the caches
}

// Entries hold blocks by reference: a block a sequence still holds costs the cache nothing, one only
// entries hold counts against the budget (block_bytes each) and goes back to the pool when
// admission or growth needs it (make_room: entries that free a block first; nothing evicted when
// even all of them would not free enough).
TEST(PrefixCache, CountsTheBlocksOnlyItHoldsAndGivesThemBackUnderPressure) {
  HybridCache pool(8, 4, 4);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::span<const int32_t> all(tokens);
  {
    PrefixCache cache(1 << 20, pool, 1000);
    ASSERT_TRUE(pool.admit(1, 10, 0));  // 3 blocks
    const std::vector<int32_t> saved(pool.block_table(1).begin(), pool.block_table(1).begin() + 2);
    pool.retain_blocks(saved);
    cache.insert(all.first(8), snapshot_of(8, 10), saved);
    EXPECT_EQ(cache.cached_blocks(), 0);
    EXPECT_EQ(cache.bytes(), 40);
    // A second sequence starts from the entry: its first two blocks are the entry's, read-only.
    const PrefixCache::Hit hit = cache.find(all, 11);
    ASSERT_EQ(hit.length, 8);
    ASSERT_TRUE(pool.admit(2, 12, 0, hit.blocks));
    EXPECT_EQ(pool.block_table(2)[0], saved[0]);
    EXPECT_EQ(pool.ref_count(saved[0]), 3);
    EXPECT_FALSE(pool.exclusive(2, 0, 9));
    EXPECT_TRUE(pool.exclusive(2, 8, 12));
    EXPECT_EQ(pool.free_blocks(), 4);
    pool.release(1);
    EXPECT_EQ(cache.cached_blocks(), 0);  // the sharer still holds them
    EXPECT_FALSE(cache.make_room(7));     // 5 free, and none only the cache holds: nothing evicted
    EXPECT_EQ(cache.entries(), 1);
    pool.release(2);
    EXPECT_EQ(cache.cached_blocks(), 2);
    EXPECT_EQ(cache.bytes(), 40 + 2000);
    EXPECT_EQ(pool.free_blocks(), 6);
    EXPECT_TRUE(cache.make_room(8));
    EXPECT_EQ(cache.entries(), 0);
    EXPECT_EQ(cache.evictions(), 1);
    EXPECT_EQ(pool.free_blocks(), 8);
  }
  {
    // Nested prefixes: the longer entry frees a block, the shorter one (least recently used) does
    // not while the longer holds its blocks, so the longer one goes first.
    PrefixCache cache(1 << 20, pool, 1000);
    const std::vector<int32_t> blocks = blocks_of(pool, 12);
    std::vector<int32_t> shorter(blocks.begin(), blocks.begin() + 2);
    pool.retain_blocks(shorter);
    cache.insert(all.first(8), snapshot_of(8, 10), shorter);
    cache.insert(all.first(12), snapshot_of(12, 10), blocks);
    EXPECT_EQ(cache.cached_blocks(), 3);
    EXPECT_TRUE(cache.make_room(6));
    EXPECT_EQ(cache.entries(), 1);
    EXPECT_EQ(cache.find(all, 12).length, 8);
    // The budget follows the sequences: within it while one shares the blocks, over it (trimmed)
    // once it lets go.
    // An older entry within the budget stays: the one over it alone goes, not least recently used first.
    PrefixCache tight(1500, pool, 1000);
    tight.insert(std::vector<int32_t>{9}, snapshot_of(1, 10), blocks_of(pool, 1));
    ASSERT_TRUE(pool.admit(3, 8, 0));
    std::vector<int32_t> held = pool.block_table(3);
    pool.retain_blocks(held);
    tight.insert(std::vector<int32_t>{7, 7, 7, 7, 7, 7, 7, 7}, snapshot_of(8, 10), held);
    EXPECT_EQ(tight.entries(), 2);
    EXPECT_EQ(tight.bytes(), 40 + 40 + 1000);
    pool.release(3);
    tight.trim();
    EXPECT_EQ(tight.entries(), 1);
    EXPECT_TRUE(tight.touch(std::vector<int32_t>{9}));
  }
  EXPECT_EQ(pool.free_blocks(), 8);
}

struct Collector {
  std::mutex mutex;
  std::condition_variable done_signal;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  TokenEvent last;
  bool done = false;
  TokenCallback callback() {
    return [this](const TokenEvent& event) {
      std::lock_guard<std::mutex> lock(mutex);
      if (event.token_id >= 0) ids.push_back(event.token_id), logprobs.push_back(event.logprob);
      if (event.finished) last = event, done = true, done_signal.notify_all();
    };
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(done_signal.wait_for(lock, std::chrono::seconds(120), [&] { return done; }));
  }
};

class PrefixCacheEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = load_model(kModelDir, {}).release(); }
  static void TearDownTestSuite() { delete model_; }
  static Model* model_;

  static EngineOptions options(bool cached) {
    EngineOptions options;
    options.prefill_chunk = 8;
    options.step_token_budget = 32;
    options.max_running = 8;
    options.cache_blocks = 512;
    options.block_size = 8;
    options.prefix_cache = cached;
    options.prefix_snapshot_stride = 16;
    return options;
  }
  std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t count) {
    std::vector<int32_t> ids(static_cast<size_t>(count));
    for (auto& id : ids) id = int32_t(rng() % model_->info().vocab_size);
    return ids;
  }
  // Sessions of `turns` turns, each turn the history (prompt + completion) plus new tokens, run
  // session by session on one engine; the per-turn outputs and cached tokens.
  struct Turn {
    std::vector<int32_t> ids;
    std::vector<float> logprobs;
    int64_t cached = 0, prompt = 0;
  };
  std::vector<std::vector<Turn>> converse(const EngineOptions& engine_options, const std::vector<int32_t>& shared,
                                          int sessions, int turns, RequestParams params, EngineStats* stats = nullptr,
                                          bool one_by_one = false) {
    Engine engine(*model_, nullptr, engine_options);
    std::vector<std::vector<Turn>> out(static_cast<size_t>(sessions));
    std::mt19937 rng(7);
    std::vector<std::vector<int32_t>> history(static_cast<size_t>(sessions), shared);
    for (int t = 0; t < turns; ++t) {
      std::vector<Collector> collectors(static_cast<size_t>(sessions));
      for (int s = 0; s < sessions; ++s) {
        const auto message = random_tokens(rng, 5 + t);
        history[size_t(s)].insert(history[size_t(s)].end(), message.begin(), message.end());
        engine.submit(history[size_t(s)], params, collectors[size_t(s)].callback());
        if (one_by_one) collectors[size_t(s)].wait();
      }
      for (int s = 0; s < sessions; ++s) {
        Collector& c = collectors[size_t(s)];
        c.wait();
        out[size_t(s)].push_back({c.ids, c.logprobs, c.last.cached_tokens, c.last.prompt_tokens});
        history[size_t(s)].insert(history[size_t(s)].end(), c.ids.begin(), c.ids.end());
      }
    }
    if (stats) *stats = engine.stats();
    return out;
  }
  static void expect_same(const std::vector<std::vector<Turn>>& cold, const std::vector<std::vector<Turn>>& warm) {
    ASSERT_EQ(cold.size(), warm.size());
    for (size_t s = 0; s < cold.size(); ++s)
      for (size_t t = 0; t < cold[s].size(); ++t) {
        EXPECT_EQ(cold[s][t].ids, warm[s][t].ids) << "session " << s << " turn " << t;
        ASSERT_EQ(cold[s][t].logprobs.size(), warm[s][t].logprobs.size());
        for (size_t i = 0; i < cold[s][t].logprobs.size(); ++i)
          EXPECT_NEAR(cold[s][t].logprobs[i], warm[s][t].logprobs[i], 1e-3) << "session " << s << " turn " << t;
      }
  }
};
Model* PrefixCacheEngine::model_ = nullptr;

// Turn after turn, a session's prompt extends the last turn's prompt and completion: from the
// second turn on all of it but the new message and the completion's last token (never fed) is
// cached, and the outputs are the cache-off outputs.
TEST_F(PrefixCacheEngine, LaterTurnsStartWhereTheLastEndedWithTheSameOutputs) {
  RequestParams params;
  params.max_tokens = 6;
  params.logprobs = 0;
  std::mt19937 rng(3);
  const auto system = random_tokens(rng, 20);
  EngineStats stats;
  const auto warm = converse(options(true), system, 3, 3, params, &stats);
  const auto cold = converse(options(false), system, 3, 3, params);
  expect_same(cold, warm);
  for (const auto& session : warm) {
    // The first turns are submitted at once: nothing saved yet, unless (a loaded machine) one
    // session's prompt passed the shared system prompt's stride point before the next one came.
    EXPECT_TRUE(session[0].cached == 0 || session[0].cached == 16) << session[0].cached;
    for (size_t t = 1; t < session.size(); ++t) {
      const int64_t history = session[t - 1].prompt + int64_t(session[t - 1].ids.size());
      EXPECT_EQ(session[t].cached, history - 1) << "turn " << t;
    }
  }
  EXPECT_GT(stats.prefix.queries, 0);
  EXPECT_GT(stats.prefix.hits, stats.prefix.queries / 2);
  EXPECT_GT(stats.prefix.snapshots, 0);
  EXPECT_GT(stats.prefix.snapshot_bytes, 0);
  for (const auto& session : cold)
    for (const auto& turn : session) EXPECT_EQ(turn.cached, 0);
}

// A shared prompt longer than the stride: other sessions start at its last stride point.
TEST_F(PrefixCacheEngine, SessionsShareTheStridesOfACommonPrompt) {
  RequestParams params;
  params.max_tokens = 3;
  std::mt19937 rng(4);
  const auto system = random_tokens(rng, 53);
  const auto warm = converse(options(true), system, 4, 1, params, nullptr, true);
  const auto cold = converse(options(false), system, 4, 1, params, nullptr, true);
  expect_same(cold, warm);
  EXPECT_EQ(warm[0][0].cached, 0);
  for (size_t s = 1; s < warm.size(); ++s) EXPECT_EQ(warm[s][0].cached, 48) << "session " << s;
}

// Preemption (a pool too small for everyone, whose saved states give their blocks back under
// pressure), n-gram speculation and a budget that holds nothing: the outputs stay those of the
// cache off.
TEST_F(PrefixCacheEngine, PreemptionSpeculationAndEvictionKeepOutputsExact) {
  RequestParams params;
  params.max_tokens = 10;
  std::mt19937 rng(5);
  const auto system = random_tokens(rng, 12);
  EngineOptions tiny = options(true);
  tiny.cache_blocks = 28;
  EngineStats stats;
  auto warm = converse(tiny, system, 6, 3, params, &stats);
  auto cold = converse(options(false), system, 6, 3, params);
  expect_same(cold, warm);
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_GT(stats.prefix.hits, 0);

  EngineOptions speculative = options(true);
  speculative.max_num_draft = 4;
  RequestParams drafted = params;
  drafted.num_draft = 3;
  warm = converse(speculative, system, 3, 3, drafted, &stats);
  expect_same(converse(options(false), system, 3, 3, params), warm);
  EXPECT_GT(stats.prefix.hits, 0);

  EngineOptions small = options(true);
  small.prefix_cache_bytes = 0;
  converse(small, system, 2, 2, params, &stats);
  EXPECT_EQ(stats.prefix.snapshots, 0);
  EXPECT_EQ(stats.prefix.hits, 0);
}

// A chat template's generation prompt (here two tokens) is not in the next turn's history: the
// state saved at the request's cache_point (where it starts) is the one the next turn finds.
TEST_F(PrefixCacheEngine, TheNextTurnStartsAtTheCachePoint) {
  std::mt19937 rng(9);
  const auto history = random_tokens(rng, 21), generation = random_tokens(rng, 2), reply = random_tokens(rng, 7),
             message = random_tokens(rng, 5);
  std::vector<int32_t> first = history;
  first.insert(first.end(), generation.begin(), generation.end());
  std::vector<int32_t> second = history;
  for (const auto* part : {&reply, &message, &generation}) second.insert(second.end(), part->begin(), part->end());
  for (bool cached : {true, false}) {
    Engine engine(*model_, nullptr, options(cached));
    RequestParams params;
    params.max_tokens = 4;
    params.cache_point = int64_t(history.size());
    Collector turn1, turn2, cold;
    engine.submit(first, params, turn1.callback());
    turn1.wait();
    engine.submit(second, params, turn2.callback());
    turn2.wait();
    EXPECT_EQ(turn2.last.cached_tokens, cached ? int64_t(history.size()) : 0);
    Engine off(*model_, nullptr, options(false));
    off.submit(second, params, cold.callback());
    cold.wait();
    EXPECT_EQ(turn2.ids, cold.ids);
  }
}

// Two requests start at once from a state saved at the end of a shared prompt of 21 tokens (blocks
// of 8: two full blocks shared, the third, partly filled, copied for each): the outputs of the
// cache off. Once everything has finished, the blocks still used are those only the cache holds.
TEST_F(PrefixCacheEngine, SharersAtOnceAndAPartialLastBlockKeepTheOutputs) {
  std::mt19937 rng(13);
  const auto system = random_tokens(rng, 21);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(system);
    const auto message = random_tokens(rng, 4 + i);
    prompts.back().insert(prompts.back().end(), message.begin(), message.end());
  }
  RequestParams params;
  params.max_tokens = 8;
  params.logprobs = 0;
  params.cache_point = int64_t(system.size());
  std::vector<std::vector<int32_t>> outputs[2];
  std::vector<int64_t> cached;
  EngineStats stats;
  for (bool prefix : {true, false}) {
    Engine engine(*model_, nullptr, options(prefix));
    Collector first;
    engine.submit(prompts[0], params, first.callback());
    first.wait();
    std::vector<Collector> rest(2);
    for (size_t i = 0; i < 2; ++i) engine.submit(prompts[i + 1], params, rest[i].callback());
    for (Collector& c : rest) c.wait();
    outputs[prefix].push_back(first.ids);
    for (Collector& c : rest) outputs[prefix].push_back(c.ids), cached.push_back(prefix ? c.last.cached_tokens : 0);
    if (prefix) stats = engine.stats();
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  EXPECT_EQ(cached, (std::vector<int64_t>{21, 21, 0, 0}));
  EXPECT_EQ(stats.prefix.hits, 42);
  EXPECT_GT(stats.prefix.blocks, 0);
  EXPECT_EQ(stats.cache.blocks_used, stats.prefix.blocks);
  EXPECT_EQ(stats.cache.sequences, 0);
}

// A pool that holds two requests' worth of saved states: later requests find it full of blocks
// only the prefix cache holds, which go back (least recently used first) so every request is
// admitted without waiting or preempting, with the outputs of the cache off.
TEST_F(PrefixCacheEngine, BlockPressureEvictsSavedStatesBeforeAnyoneWaits) {
  RequestParams params;
  params.max_tokens = 4;
  std::mt19937 rng(17);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(random_tokens(rng, 30));
  EngineOptions tight = options(true);
  tight.cache_blocks = 10;
  std::vector<std::vector<int32_t>> outputs[2];
  EngineStats stats;
  for (bool prefix : {true, false}) {
    EngineOptions engine_options = prefix ? tight : options(false);
    Engine engine(*model_, nullptr, engine_options);
    for (const auto& prompt : prompts) {
      Collector c;
      engine.submit(prompt, params, c.callback());
      c.wait();
      outputs[prefix].push_back(c.ids);
    }
    if (prefix) stats = engine.stats();
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  EXPECT_GT(stats.prefix.evictions, 0);
  EXPECT_EQ(stats.preemptions, 0);
  EXPECT_EQ(stats.cache.blocks_used, stats.prefix.blocks);
}

TEST_F(PrefixCacheEngine, RefusesAStrideThatIsNotAMultipleOfTheChunk) {
  EngineOptions bad = options(true);
  bad.prefix_snapshot_stride = 12;
  EXPECT_THROW(Engine(*model_, nullptr, bad), Error);
}

}  // namespace
}  // namespace vt
