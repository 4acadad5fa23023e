// Prefix caching on the CUDA model (golden Qwen3.5, f32 activations): conversations whose later
// turns start from device snapshots of the earlier turns (KV rows and linear-attention states)
// give the greedy tokens of the cache off, and report the cached prompt tokens.
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
  EXPECT_EQ(warm_stats.cache.blocks_used + warm_stats.cache.slots_used, 0);
}

}  // namespace
}  // namespace vt
