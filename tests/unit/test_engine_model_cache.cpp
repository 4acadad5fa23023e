// The engine over a model with a cache of its own (Model::kv_cache(), as the CUDA runner's device
// pool): it admits, grows and releases the model's entries, its sequences are made over them
// (new_sequence_in_cache), every forward and restored prefix finds its tokens' blocks reserved,
// the pool's size and block size are the model's, and the greedy outputs are those of the engine
// over the same model with a cache of its own, through preemption and the prefix cache.
#include <gtest/gtest.h>

#include <algorithm>
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

// The hash of tokens [0, p] from that of tokens [0, p): what a KV row at position p depends on.
uint64_t chain(uint64_t hash, int32_t token) {
  uint64_t z = hash + 0x9E3779B97F4A7C15ull + uint64_t(uint32_t(token));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  return z ^ (z >> 31);
}

// The golden CPU model, its sequences in a HybridCache it owns, as the CUDA runner's are: every
// forward checks that the sequence's entry holds blocks for all its tokens. The pool's rows carry
// tags, what the CUDA pool's KV rows would depend on (the hash of the tokens up to the row's
// position): a forward reads the tags of the rows before its tokens from the sequence's blocks and
// checks them, and writes its tokens' tags into its blocks, counting writes into blocks it does not
// hold alone. So a prefix shared through blocks (and the copy of its last block) is checked to
// hold what the sequence would have computed, and never to be overwritten. The numbers themselves
// come from the CPU model's own copy (its snapshots hold the KV rows).
class CachedModel final : public Model {
 public:
  CachedModel(Model& inner, int64_t blocks, int64_t block_size, int64_t slots, int64_t block_bytes = 0)
      : inner_(inner), cache_(blocks, block_size, slots), tags_(size_t(blocks * block_size), 0),
        block_bytes_(block_bytes) {}

  const ModelInfo& info() const override { return inner_.info(); }
  std::string describe() const override { return inner_.describe(); }
  HybridCache* kv_cache() override { return &cache_; }
  std::unique_ptr<SequenceState> new_sequence(int64_t) const override {
    VT_FAIL("CachedModel: sequences come from the engine's entries");
  }
  std::unique_ptr<SequenceState> new_sequence_in_cache(int64_t cache_id, int64_t capacity) const override {
    VT_CHECK(cache_.contains(cache_id), "CachedModel: entry ", cache_id, " was not admitted");
    ++made_;
    return std::make_unique<State>(cache_id, inner_.new_sequence(capacity), &live_);
  }
  void forward(std::span<const int32_t> tokens, SequenceState& base, const TensorView& logits,
               const ForwardOptions& options) override {
    auto& state = static_cast<State&>(base);
    const int64_t start = state.length(), end = start + int64_t(tokens.size());
    if (!check_blocks(state, end)) return inner_.forward(tokens, *state.inner, logits, options), state.sync();
    const std::vector<int32_t>& blocks = cache_.block_table(state.id);
    int32_t most_owners = 0;
    for (int64_t p = 0; p < start; ++p) {
      most_owners = std::max(most_owners, cache_.ref_count(blocks[size_t(p / block_size())]));
      if (tag(blocks, p) != state.history[size_t(p)]) ++wrong_reads_;
    }
    most_owners_ = std::max<int64_t>(most_owners_, most_owners);
    if (start >= block_size()) {  // running sequences whose first block is this one's
      int64_t sharers = 0;
      for (const State* other : live_)
        sharers += cache_.contains(other->id) && !cache_.block_table(other->id).empty() &&
                   cache_.block_table(other->id)[0] == blocks[0];
      most_sharers_ = std::max(most_sharers_.load(), sharers);
      sole_reads_ += state.restored && cache_.ref_count(blocks[0]) == 1;
    }
    if (!cache_.exclusive(state.id, start, end)) ++shared_writes_;
    inner_.forward(tokens, *state.inner, logits, options);
    state.history.resize(size_t(start));
    for (int32_t token : tokens) {
      state.history.push_back(chain(state.history.empty() ? 0 : state.history.back(), token));
      tag(blocks, int64_t(state.history.size()) - 1) = state.history.back();
    }
    state.sync();
  }
  bool supports_rollback() const override { return inner_.supports_rollback(); }
  void rollback(SequenceState& base, int64_t length) override {
    auto& state = static_cast<State&>(base);
    inner_.rollback(*state.inner, length);
    state.sync();
  }
  void commit(SequenceState& base) override {
    auto& state = static_cast<State&>(base);
    inner_.commit(*state.inner);
    state.sync();
  }
  bool supports_prefix_cache() const override { return true; }
  std::unique_ptr<StateSnapshot> save_state(const SequenceState& base) override {
    const auto& state = static_cast<const State&>(base);
    std::unique_ptr<StateSnapshot> inner = inner_.save_state(*state.inner);
    if (!inner) return nullptr;
    return std::make_unique<Snapshot>(std::move(inner), std::vector<uint64_t>(
        state.history.begin(), state.history.begin() + state.length()));
  }
  void restore_state(const StateSnapshot& base_snapshot, SequenceState& base) override {
    const auto& snapshot = static_cast<const Snapshot&>(base_snapshot);
    auto& state = static_cast<State&>(base);
    if (check_blocks(state, snapshot.length())) {
      const std::vector<int32_t>& blocks = cache_.block_table(state.id);
      for (int64_t p = 0; p < snapshot.length(); ++p)
        if (tag(blocks, p) != snapshot.history[size_t(p)]) ++wrong_reads_;
    }
    inner_.restore_state(*snapshot.inner, *state.inner);
    state.history = snapshot.history;
    state.restored = true;
    state.sync();
  }
  void copy_kv_block(int32_t from, int32_t to) override {
    if (failing_copies_ > 0) {
      --failing_copies_;
      VT_FAIL("CachedModel: a block copy failed");
    }
    std::copy_n(tags_.begin() + from * block_size(), block_size(), tags_.begin() + to * block_size());
    ++block_copies_;
  }
  int64_t kv_block_bytes() const override { return block_bytes_; }

  int64_t made() const { return made_; }
  int64_t short_of_blocks() const { return short_of_blocks_; }
  int64_t wrong_reads() const { return wrong_reads_; }      // rows whose tag is not the sequence's
  int64_t shared_writes() const { return shared_writes_; }  // forwards writing a block held by another
  int64_t block_copies() const { return block_copies_; }
  void fail_copies(int64_t count) { failing_copies_ = count; }  // the next `count` block copies throw
  int64_t most_owners() const { return most_owners_; }  // the most owners of a block a forward read
  int64_t most_sharers() const { return most_sharers_; }  // the most running sequences over one first block
  // Forwards of a sequence started from a saved prefix whose first block it alone holds now (every
  // saved state that held it is gone).
  int64_t sole_reads() const { return sole_reads_; }

 private:
  struct State final : SequenceState {
    State(int64_t cache_id, std::unique_ptr<SequenceState> state, std::vector<const State*>* live)
        : id(cache_id), inner(std::move(state)), live_(live) {
      live_->push_back(this);
      sync();
    }
    ~State() override { live_->erase(std::find(live_->begin(), live_->end(), this)); }
    void sync() {
      length_ = inner->length();
      capacity_ = inner->capacity();
      rollback_floor_ = inner->rollback_floor();
      history.resize(size_t(length_));
    }
    int64_t id;
    std::unique_ptr<SequenceState> inner;
    std::vector<uint64_t> history;  // the tag of each position it holds
    std::vector<const State*>* live_;
    bool restored = false;  // started from a saved prefix
  };
  struct Snapshot final : StateSnapshot {
    Snapshot(std::unique_ptr<StateSnapshot> state, std::vector<uint64_t> tags)
        : inner(std::move(state)), history(std::move(tags)) {
      length_ = inner->length();
      bytes_ = inner->bytes();
    }
    std::unique_ptr<StateSnapshot> inner;
    std::vector<uint64_t> history;
  };
  int64_t block_size() const { return cache_.block_size(); }
  uint64_t& tag(const std::vector<int32_t>& blocks, int64_t position) {
    return tags_[size_t(blocks[size_t(position / block_size())] * block_size() + position % block_size())];
  }
  bool check_blocks(const State& state, int64_t tokens) {
    if (int64_t(cache_.block_table(state.id).size()) * cache_.block_size() >= tokens) return true;
    ++short_of_blocks_;
    return false;
  }

  Model& inner_;
  HybridCache cache_;
  std::vector<uint64_t> tags_;  // per pool row
  int64_t block_bytes_;
  mutable std::vector<const State*> live_;  // the engine thread's sequences
  mutable std::atomic<int64_t> made_{0};
  std::atomic<int64_t> short_of_blocks_{0}, wrong_reads_{0}, shared_writes_{0}, block_copies_{0}, most_owners_{0},
      most_sharers_{0}, sole_reads_{0}, failing_copies_{0};
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

// Requests in waves on one engine: each wave's requests are submitted at once, the next wave once
// they have all finished. The outcomes in order, and the engine's stats at the end.
struct Request {
  std::vector<int32_t> prompt;
  RequestParams params;
};
std::vector<Outcome> run_waves(Model& model, const EngineOptions& options, const std::vector<std::vector<Request>>& waves,
                               EngineStats* stats = nullptr) {
  std::mutex mutex;
  std::condition_variable done_signal;
  std::vector<Outcome> outcomes;
  Engine engine(model, nullptr, options);
  for (const auto& wave : waves) {
    const size_t first = outcomes.size();
    outcomes.resize(first + wave.size());
    size_t done = 0;
    for (size_t i = 0; i < wave.size(); ++i)
      engine.submit(wave[i].prompt, wave[i].params, [&, i](const TokenEvent& event) {
        std::lock_guard<std::mutex> lock(mutex);
        Outcome& outcome = outcomes[first + i];
        if (event.token_id >= 0) outcome.ids.push_back(event.token_id);
        if (event.finished) outcome.cached = event.cached_tokens, outcome.error = event.error, ++done;
        done_signal.notify_all();
      });
    std::unique_lock<std::mutex> lock(mutex);
    EXPECT_TRUE(done_signal.wait_for(lock, std::chrono::seconds(120), [&] { return done == wave.size(); }));
  }
  if (stats) *stats = engine.stats();
  return outcomes;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t count, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(count), 0);
  for (auto& id : ids) id = int32_t(rng() % vocab);
  return ids;
}

std::vector<int32_t> joined(std::vector<int32_t> head, const std::vector<int32_t>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
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
  EXPECT_EQ(cached.wrong_reads(), 0);
  EXPECT_EQ(cached.shared_writes(), 0);
  EXPECT_EQ(cached.kv_cache()->free_blocks(), 32);  // the engines' saved states went with them
}

// Three requests start at once from a state saved at the end of a shared prompt of 21 tokens
// (blocks of 8): each holds the prompt's two full blocks at the head of its table (read-only) and
// a copy of the third, then a second turn starts from the end of a completion. Every forward
// reads, through the shared blocks, the rows it would have computed; none writes a shared block;
// the outputs are those of the model alone; once the engine ends the pool is whole again.
TEST_F(EngineModelCache, SharersReadThePrefixBlocksAndCopyTheLastOne) {
  CachedModel cached(*model_, 64, 8, 6, 1000);
  EngineOptions options;
  options.prefill_chunk = 8;
  options.step_token_budget = 24;
  options.max_running = 6;
  options.prefix_cache = true;
  options.prefix_snapshot_stride = 8;
  const int64_t vocab = model_->info().vocab_size;
  std::mt19937 rng(21);
  const std::vector<int32_t> system = random_prompt(rng, 21, vocab);
  RequestParams params;
  params.max_tokens = 10;
  params.cache_point = int64_t(system.size());
  std::vector<std::vector<Request>> waves(2);
  waves[0].push_back({joined(system, random_prompt(rng, 3, vocab)), params});
  for (int i = 0; i < 3; ++i) waves[1].push_back({joined(system, random_prompt(rng, 4 + i, vocab)), params});
  EngineStats stats;
  auto outcomes = run_waves(cached, options, waves, &stats);
  EXPECT_EQ(stats.cache.blocks_used, stats.prefix.blocks);
  EXPECT_EQ(stats.prefix.bytes, stats.prefix.snapshot_bytes + 1000 * stats.prefix.blocks);
  // The next turn of the first request: its prompt, completion and a new message.
  std::vector<std::vector<Request>> turn = waves;
  turn.push_back({{joined(joined(waves[0][0].prompt, outcomes[0].ids), random_prompt(rng, 5, vocab)), params}});
  outcomes = run_waves(cached, options, turn);
  EXPECT_EQ(cached.kv_cache()->free_blocks(), 64);
  EngineOptions roomy;
  roomy.prefill_chunk = 8;
  roomy.step_token_budget = 24;
  size_t i = 0;
  for (const auto& wave : turn)
    for (const Request& request : wave) {
      EXPECT_EQ(outcomes[i].error, "") << "request " << i;
      EXPECT_EQ(outcomes[i].ids, run_waves(*model_, roomy, {{request}})[0].ids) << "request " << i;
      ++i;
    }
  EXPECT_EQ(outcomes[0].cached, 0);
  for (size_t r = 1; r <= 3; ++r) EXPECT_EQ(outcomes[r].cached, 21) << "request " << r;
  EXPECT_EQ(outcomes[4].cached, int64_t(waves[0][0].prompt.size() + outcomes[0].ids.size()) - 1);
  EXPECT_GE(cached.most_sharers(), 2);  // two sequences over the same blocks at once
  EXPECT_GE(cached.block_copies(), 3);
  EXPECT_EQ(cached.wrong_reads(), 0);
  EXPECT_EQ(cached.shared_writes(), 0);
  EXPECT_EQ(cached.short_of_blocks(), 0);
}

// A long request runs over a saved prefix's blocks while others, in a pool too small for them all,
// push the saved states out (the byte budget, and the blocks admission and growth need): the entry
// it started from goes while it runs, its blocks stay its own until it ends. Speculative decoding
// (n-gram drafts rolled back) and preemption on top; the outputs are those of the model alone, and
// every block is back in the pool at the end.
TEST_F(EngineModelCache, SavedStatesGoUnderPressureWhileASharerRuns) {
  CachedModel cached(*model_, 16, 8, 4, 64);
  EngineOptions options;
  options.prefill_chunk = 8;
  options.step_token_budget = 24;
  options.max_running = 4;
  options.prefix_cache = true;
  options.prefix_snapshot_stride = 1024;  // states at the cache point and the ends only
  options.max_num_draft = 3;
  const int64_t vocab = model_->info().vocab_size;
  std::mt19937 rng(23);
  const std::vector<int32_t> system = random_prompt(rng, 20, vocab);
  RequestParams short_params, long_params;
  short_params.max_tokens = 6;
  short_params.cache_point = int64_t(system.size());
  long_params = short_params;
  long_params.max_tokens = 40;
  long_params.num_draft = 3;
  std::vector<std::vector<Request>> waves(2);
  waves[0].push_back({joined(system, random_prompt(rng, 3, vocab)), short_params});
  waves[1].push_back({joined(system, random_prompt(rng, 4, vocab)), long_params});
  for (int i = 0; i < 4; ++i) waves[1].push_back({random_prompt(rng, 22, vocab), short_params});
  EngineStats stats;
  run_waves(cached, options, {waves[0]}, &stats);
  options.prefix_cache_bytes = stats.prefix.bytes;  // the first request's states, and no more
  const auto outcomes = run_waves(cached, options, waves, &stats);
  EXPECT_GT(stats.prefix.evictions, 0);
  EXPECT_GT(cached.sole_reads(), 0);
  EXPECT_EQ(outcomes[1].cached, 20);
  EXPECT_EQ(cached.kv_cache()->free_blocks(), 16);
  EngineOptions roomy;
  roomy.prefill_chunk = 8;
  roomy.step_token_budget = 24;
  size_t i = 0;
  for (const auto& wave : waves)
    for (const Request& request : wave) {
      RequestParams plain = request.params;
      plain.num_draft = 0;
      EXPECT_EQ(outcomes[i].error, "") << "request " << i;
      EXPECT_EQ(outcomes[i].ids, run_waves(*model_, roomy, {{{request.prompt, plain}}})[0].ids) << "request " << i;
      ++i;
    }
  EXPECT_EQ(cached.wrong_reads(), 0);
  EXPECT_EQ(cached.shared_writes(), 0);
  EXPECT_EQ(cached.short_of_blocks(), 0);
}

// Saving a running request's state copies its partly filled last block into one of the cache's:
// when that copy fails, the state is not saved and the request goes on, and the block taken for
// the copy goes back to the pool with the rest (it stayed taken, one block fewer for good).
TEST_F(EngineModelCache, AFailedCopyOfTheLastBlockGivesItBack) {
  CachedModel cached(*model_, 32, 8, 4);
  EngineOptions options;
  options.prefill_chunk = 8;
  options.step_token_budget = 24;
  options.max_running = 4;
  options.prefix_cache = true;
  options.prefix_snapshot_stride = 1024;  // a state at the prompt's end (21 tokens: 2 full blocks) and the completion's
  std::mt19937 rng(31);
  const std::vector<int32_t> prompt = random_prompt(rng, 21, model_->info().vocab_size);
  EngineStats stats;
  cached.fail_copies(1);
  const auto outcomes = run_all(cached, options, {prompt}, 4, &stats);
  EXPECT_EQ(cached.block_copies(), 0);
  EXPECT_EQ(outcomes[0].error, "");
  EXPECT_EQ(outcomes[0].ids, run_all(*model_, EngineOptions{}, {prompt}, 4)[0].ids);
  EXPECT_EQ(stats.prefix.snapshots, 1);  // the completion's end (24 tokens, full blocks: no copy)
  EXPECT_EQ(stats.cache.blocks_used, stats.prefix.blocks);
  EXPECT_EQ(cached.kv_cache()->free_blocks(), 32);  // the engine's saved states went with it
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
