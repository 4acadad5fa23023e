// Prefix caching on the CUDA model (golden Qwen3.5, f32 activations): conversations whose later
// turns start from the earlier turns' saved states (their KV blocks shared, the linear-attention
// states from device snapshots) give the greedy tokens of the cache off and report the cached
// prompt tokens; requests at once over one saved prefix, in a pool under pressure, too.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <random>

#include "cuda_test_support.h"
#include "engine/engine.h"
#include "runtime/qwen3_5_cuda.h"

namespace vt {
namespace {

const std::string kGolden = std::string(VT_SOURCE_DIR) + "/tests/golden/";

struct Turn {
  std::vector<int32_t> ids;
  int64_t cached = 0, prompt = 0;
};

std::vector<std::vector<Turn>> converse(Model& model, bool cached, int sessions, int turns, EngineStats* stats) {
  EngineOptions options;
  options.max_running = 4;
  options.step_token_budget = 64;
  options.prefill_chunk = 16;
  options.cache_blocks = 64;
  options.prefix_cache = cached;
  options.prefix_snapshot_stride = 32;
  Engine engine(model, nullptr, options);
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> history(static_cast<size_t>(sessions));
  std::vector<std::vector<Turn>> out(static_cast<size_t>(sessions));
  for (int t = 0; t < turns; ++t) {
    for (int s = 0; s < sessions; ++s) {
      for (int i = 0; i < 9 + 3 * t; ++i) history[size_t(s)].push_back(int32_t(rng() % model.info().vocab_size));
      std::mutex mutex;
      std::condition_variable done_signal;
      Turn turn;
      bool done = false;
      RequestParams params;
      params.max_tokens = 6;
      engine.submit(history[size_t(s)], params, [&](const TokenEvent& event) {
        std::lock_guard<std::mutex> lock(mutex);
        if (event.token_id >= 0) turn.ids.push_back(event.token_id);
        if (event.finished) turn.cached = event.cached_tokens, turn.prompt = event.prompt_tokens, done = true;
        done_signal.notify_all();
      });
      std::unique_lock<std::mutex> lock(mutex);
      EXPECT_TRUE(done_signal.wait_for(lock, std::chrono::seconds(60), [&] { return done; }));
      history[size_t(s)].insert(history[size_t(s)].end(), turn.ids.begin(), turn.ids.end());
      out[size_t(s)].push_back(turn);
    }
  }
  *stats = engine.stats();
  return out;
}

class CudaPrefixCache : public testing::GpuTest {};

TEST_F(CudaPrefixCache, LaterTurnsFromDeviceSnapshotsGiveTheCacheOffTokens) {
  CudaModelOptions options;
  options.activations = DType::kF32;
  options.max_sequences = 4;
  options.max_context = 160;
  options.max_step_tokens = 64;
  options.max_logit_rows = 4;
  auto model = load_qwen35_cuda(kGolden + "qwen3_5_dense", options);
  ASSERT_TRUE(model->supports_prefix_cache());
  EngineStats warm_stats, cold_stats;
  const auto warm = converse(*model, true, 3, 4, &warm_stats);
  const auto cold = converse(*model, false, 3, 4, &cold_stats);
  for (size_t s = 0; s < warm.size(); ++s)
    for (size_t t = 0; t < warm[s].size(); ++t) {
      EXPECT_EQ(warm[s][t].ids, cold[s][t].ids) << "session " << s << " turn " << t;
      EXPECT_EQ(cold[s][t].cached, 0);
      if (t > 0) {
        EXPECT_EQ(warm[s][t].cached, warm[s][t - 1].prompt + int64_t(warm[s][t - 1].ids.size()) - 1)
            << "session " << s << " turn " << t;
      }
    }
  EXPECT_GT(warm_stats.prefix.hits, warm_stats.prefix.queries / 2);
  EXPECT_GT(warm_stats.prefix.snapshot_bytes, 0);
  // Idle, the pool's used blocks are those only the saved states hold; with the engine gone, none.
  EXPECT_EQ(warm_stats.cache.blocks_used, warm_stats.prefix.blocks);
  EXPECT_EQ(warm_stats.cache.slots_used, 0);
  EXPECT_EQ(model->kv_cache()->free_blocks(), model->kv_cache()->num_blocks());
}

// Three requests at once over one saved prompt of 21 tokens (blocks of 16: one full block shared
// by all three, the partly filled second one copied for each), and a pool of 12 blocks that the
// saved states give back under pressure: the greedy tokens of the cache off, every block back in
// the pool at the end.
TEST_F(CudaPrefixCache, SharersAtOnceOverOneSavedPrefixGiveTheCacheOffTokens) {
  CudaModelOptions options;
  options.activations = DType::kF32;
  options.max_sequences = 4;
  options.max_context = 96;
  options.max_step_tokens = 64;
  options.max_logit_rows = 4;
  options.block_size = 16;
  options.cache_blocks = 12;
  auto model = load_qwen35_cuda(kGolden + "qwen3_5_dense", options);
  std::mt19937 rng(13);
  const int64_t vocab = model->info().vocab_size;
  std::vector<int32_t> system(21);
  for (auto& id : system) id = int32_t(rng() % vocab);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(system);
    for (int j = 0; j < 5 + i; ++j) prompts.back().push_back(int32_t(rng() % vocab));
  }
  std::vector<std::vector<int32_t>> outputs[2];
  std::vector<int64_t> cached;
  EngineStats stats;
  for (bool prefix : {true, false}) {
    EngineOptions engine_options;
    engine_options.max_running = 4;
    engine_options.step_token_budget = 64;
    engine_options.prefill_chunk = 16;
    engine_options.prefix_cache = prefix;
    engine_options.prefix_snapshot_stride = 32;
    Engine engine(*model, nullptr, engine_options);
    RequestParams params;
    params.max_tokens = 24;
    params.cache_point = int64_t(system.size());
    std::mutex mutex;
    std::condition_variable done_signal;
    std::vector<std::vector<int32_t>> ids(prompts.size());
    std::vector<int64_t> request_cached(prompts.size());
    size_t done = 0;
    const auto submit = [&](size_t i) {
      engine.submit(prompts[i], params, [&, i](const TokenEvent& event) {
        std::lock_guard<std::mutex> lock(mutex);
        if (event.token_id >= 0) ids[i].push_back(event.token_id);
        if (event.finished) request_cached[i] = event.cached_tokens, ++done;
        done_signal.notify_all();
      });
    };
    const auto wait = [&](size_t count) {
      std::unique_lock<std::mutex> lock(mutex);
      EXPECT_TRUE(done_signal.wait_for(lock, std::chrono::seconds(60), [&] { return done == count; }));
    };
    submit(0);
    wait(1);
    for (size_t i = 1; i < prompts.size(); ++i) submit(i);
    wait(prompts.size());
    outputs[prefix] = ids;
    if (prefix) cached = request_cached, stats = engine.stats();
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  EXPECT_EQ(cached, (std::vector<int64_t>{0, 21, 21, 21}));
  EXPECT_EQ(stats.cache.blocks_used, stats.prefix.blocks);
  EXPECT_EQ(model->kv_cache()->free_blocks(), 12);
}

}  // namespace
}  // namespace vt
