// The engine over a model with a cache of its own (Model::kv_cache(), as the CUDA runner's device
// pool): it admits, grows and releases the model's entries, its sequences are made over them
// (new_sequence_in_cache), every forward and restored prefix finds its tokens' blocks reserved,
// the pool's size and block size are the model's, and the greedy outputs are those of the engine
// over the same model with a cache of its own, through preemption and the prefix cache.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>

#include "cache/hybrid_cache.h"
#include "core/error.h"
#include "engine/engine.h"
#include "models/registry.h"

namespace vt {
namespace {

const std::string kModelDir = std::string(VT_SOURCE_DIR) + "/tests/golden/qwen3_5_dense";

// The golden CPU model, its sequences in a HybridCache it owns, as the CUDA runner's are: every
// forward checks that the sequence's entry holds blocks for all its tokens.
class CachedModel final : public Model {
 public:
  CachedModel(Model& inner, int64_t blocks, int64_t block_size, int64_t slots)
      : inner_(inner), cache_(blocks, block_size, slots) {}

  const ModelInfo& info() const override { return inner_.info(); }
  std::string describe() const override { return inner_.describe(); }
  HybridCache* kv_cache() override { return &cache_; }
  std::unique_ptr<SequenceState> new_sequence(int64_t) const override {
    VT_FAIL("CachedModel: sequences come from the engine's entries");
  }
  std::unique_ptr<SequenceState> new_sequence_in_cache(int64_t cache_id, int64_t capacity) const override {
    VT_CHECK(cache_.contains(cache_id), "CachedModel: entry ", cache_id, " was not admitted");
    ++made_;
    return std::make_unique<State>(cache_id, inner_.new_sequence(capacity));
  }
  void forward(std::span<const int32_t> tokens, SequenceState& base, const TensorView& logits,
               const ForwardOptions& options) override {
    auto& state = static_cast<State&>(base);
    check_blocks(state, state.length() + int64_t(tokens.size()));
    inner_.forward(tokens, *state.inner, logits, options);
    state.sync();
  }
  bool supports_prefix_cache() const override { return true; }
  std::unique_ptr<StateSnapshot> save_state(const SequenceState& base) override {
    return inner_.save_state(*static_cast<const State&>(base).inner);
  }
  void restore_state(const StateSnapshot& snapshot, SequenceState& base) override {
    auto& state = static_cast<State&>(base);
    check_blocks(state, snapshot.length());
    inner_.restore_state(snapshot, *state.inner);
    state.sync();
  }

  int64_t made() const { return made_; }
  int64_t short_of_blocks() const { return short_of_blocks_; }

 private:
  struct State final : SequenceState {
    State(int64_t cache_id, std::unique_ptr<SequenceState> state) : id(cache_id), inner(std::move(state)) { sync(); }
    void sync() {
      length_ = inner->length();
      capacity_ = inner->capacity();
      rollback_floor_ = inner->rollback_floor();
    }
    int64_t id;
    std::unique_ptr<SequenceState> inner;
  };
  void check_blocks(const State& state, int64_t tokens) {
    if (int64_t(cache_.block_table(state.id).size()) * cache_.block_size() < tokens) ++short_of_blocks_;
  }

  Model& inner_;
  HybridCache cache_;
  mutable std::atomic<int64_t> made_{0};
  std::atomic<int64_t> short_of_blocks_{0};
};

struct Outcome {
  std::vector<int32_t> ids;
  int64_t cached = 0;
  std::string error;
};

std::vector<Outcome> run_all(Model& model, const EngineOptions& options, const std::vector<std::vector<int32_t>>& prompts,
                             int64_t max_tokens, EngineStats* stats = nullptr) {
  std::mutex mutex;
  std::condition_variable done_signal;
  std::vector<Outcome> outcomes(prompts.size());
  size_t done = 0;
  Engine engine(model, nullptr, options);
  RequestParams params;
  params.max_tokens = max_tokens;
  for (size_t i = 0; i < prompts.size(); ++i)
    engine.submit(prompts[i], params, [&, i](const TokenEvent& event) {
      std::lock_guard<std::mutex> lock(mutex);
      if (event.token_id >= 0) outcomes[i].ids.push_back(event.token_id);
      if (event.finished) {
        outcomes[i].cached = event.cached_tokens;
        outcomes[i].error = event.error;
        ++done;
        done_signal.notify_all();
      }
    });
  std::unique_lock<std::mutex> lock(mutex);
  EXPECT_TRUE(done_signal.wait_for(lock, std::chrono::seconds(120), [&] { return done == prompts.size(); }));
  lock.unlock();
  if (stats) *stats = engine.stats();
  return outcomes;
}

class EngineModelCache : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = load_model(kModelDir, {}).release(); }
  static void TearDownTestSuite() { delete model_; }
  static Model* model_;
};
Model* EngineModelCache::model_ = nullptr;

// A pool too small for the requests at once (10 blocks of 8 tokens, 6 slots): the engine admits
// into the model's pool, preempts when it runs dry, and each request gets what it gets from an
// engine with a roomy cache of its own; every forward had its blocks, and the model's cache is
// empty afterwards.
TEST_F(EngineModelCache, AdmitsGrowsAndReleasesTheModelsEntries) {
  CachedModel cached(*model_, 10, 8, 6);
  EngineOptions options;
  options.prefill_chunk = 8;
  options.step_token_budget = 24;
  options.max_running = 8;  // more than the model's slots: the rest wait
  options.cache_blocks = 1000;  // the engine's own pool: unused over a model with a cache
  options.block_size = 16;
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 9; ++i) {
    std::vector<int32_t> prompt(size_t(5 + i * 3));
    for (auto& id : prompt) id = int32_t(rng() % model_->info().vocab_size);
    prompts.push_back(prompt);
  }
  EngineStats stats;
  const auto together = run_all(cached, options, prompts, 14, &stats);
  EXPECT_EQ(stats.cache.blocks_total, 10);
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_EQ(cached.short_of_blocks(), 0);
  EXPECT_GE(cached.made(), int64_t(prompts.size()));
  const CacheUsage usage = cached.kv_cache()->usage();
  EXPECT_EQ(usage.blocks_used + usage.slots_used + usage.sequences, 0);
  EngineOptions roomy;
  roomy.prefill_chunk = 8;
  roomy.step_token_budget = 24;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(together[i].error, "") << "request " << i;
    EXPECT_EQ(together[i].ids, run_all(*model_, roomy, {prompts[i]}, 14)[0].ids) << "request " << i;
  }
  // The largest request is the model's pool, not the engine's options.
  Engine engine(cached, nullptr, options);
  EXPECT_EQ(engine.max_request_tokens(), std::min<int64_t>(80, model_->info().max_positions));
}

// The prefix cache restores into the model's entries (admitted for the whole context first), and
// a second turn gets the tokens of the cache off.
TEST_F(EngineModelCache, PrefixCacheRestoresIntoTheEntry) {
  CachedModel cached(*model_, 32, 8, 4);
  EngineOptions options;
  options.prefill_chunk = 8;
  options.step_token_budget = 24;
  options.max_running = 4;
  options.prefix_snapshot_stride = 8;
  std::mt19937 rng(9);
  std::vector<int32_t> first(20);
  for (auto& id : first) id = int32_t(rng() % model_->info().vocab_size);
  std::vector<std::vector<Outcome>> turns;
  for (bool prefix : {true, false}) {
    options.prefix_cache = prefix;
    std::vector<int32_t> history = first;
    std::vector<Outcome> outcomes;
    // The turns run on one engine, so the second finds the first's saved state.
    std::mutex mutex;
    std::condition_variable done_signal;
    Engine engine(cached, nullptr, options);
    for (int turn = 0; turn < 2; ++turn) {
      Outcome outcome;
      bool done = false;
      RequestParams params;
      params.max_tokens = 6;
      engine.submit(history, params, [&](const TokenEvent& event) {
        std::lock_guard<std::mutex> lock(mutex);
        if (event.token_id >= 0) outcome.ids.push_back(event.token_id);
        if (event.finished) outcome.cached = event.cached_tokens, outcome.error = event.error, done = true;
        done_signal.notify_all();
      });
      std::unique_lock<std::mutex> lock(mutex);
      ASSERT_TRUE(done_signal.wait_for(lock, std::chrono::seconds(60), [&] { return done; }));
      history.insert(history.end(), outcome.ids.begin(), outcome.ids.end());
      history.push_back(int32_t(turn + 1));
      outcomes.push_back(outcome);
    }
    turns.push_back(outcomes);
  }
  EXPECT_GT(turns[0][1].cached, 0);
  EXPECT_EQ(turns[1][1].cached, 0);
  for (size_t t = 0; t < 2; ++t) {
    EXPECT_EQ(turns[0][t].error, "");
    EXPECT_EQ(turns[0][t].ids, turns[1][t].ids) << "turn " << t;
  }
  EXPECT_EQ(cached.short_of_blocks(), 0);
}

// An engine that ends with requests running gives their entries back to the model's cache.
TEST_F(EngineModelCache, EndingTheEngineReleasesRunningEntries) {
  CachedModel cached(*model_, 16, 8, 2);
  EngineOptions options;
  options.prefill_chunk = 8;
  options.step_token_budget = 24;
  options.max_running = 2;
  std::mutex mutex;
  std::condition_variable started;
  int tokens = 0;
  {
    Engine engine(cached, nullptr, options);
    RequestParams params;
    params.max_tokens = 100;
    for (int i = 0; i < 2; ++i)
      engine.submit({int32_t(3 + i), 5, 7}, params, [&](const TokenEvent& event) {
        std::lock_guard<std::mutex> lock(mutex);
        tokens += event.token_id >= 0;
        started.notify_all();
      });
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(started.wait_for(lock, std::chrono::seconds(60), [&] { return tokens >= 2; }));
  }
  const CacheUsage usage = cached.kv_cache()->usage();
  EXPECT_EQ(usage.blocks_used + usage.slots_used + usage.sequences, 0);
}

}  // namespace
}  // namespace vt
