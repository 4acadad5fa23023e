// The serving engine on the tiny golden Qwen3.5 model: greedy outputs equal generate() and do not
// depend on what else runs; admission, queueing, cancellation and stop tokens; stop strings.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/stop_strings.h"
#include "models/registry.h"

namespace vt {
namespace {

const std::string kModelDir = std::string(VT_SOURCE_DIR) + "/tests/golden/qwen3_5_dense";

// Collects one request's events; wait() returns when the final one arrives.
struct Collector {
  std::mutex mutex;
  std::condition_variable done_signal;
  std::vector<int32_t> ids;
  TokenEvent last;
  bool done = false;

  TokenCallback callback() {
    return [this](const TokenEvent& event) {
      std::lock_guard<std::mutex> lock(mutex);
      if (event.token_id >= 0) ids.push_back(event.token_id);
      if (event.finished) {
        last = event;
        done = true;
        done_signal.notify_all();
      }
    };
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(done_signal.wait_for(lock, std::chrono::seconds(120), [&] { return done; }));
  }
};

std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t length, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(length));
  for (auto& id : ids) id = int32_t(rng() % vocab);
  return ids;
}

std::vector<int32_t> run_alone(Model& model, const EngineOptions& options, const std::vector<int32_t>& prompt,
                               const RequestParams& params) {
  Engine engine(model, nullptr, options);
  Collector collector;
  engine.submit(prompt, params, collector.callback());
  collector.wait();
  return collector.ids;
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = load_model(kModelDir, {}).release(); }
  static void TearDownTestSuite() { delete model_; }
  static Model* model_;
};
Model* EngineTest::model_ = nullptr;

TEST_F(EngineTest, GreedyEqualsGenerate) {
  std::mt19937 rng(1);
  const auto prompt = random_prompt(rng, 9, model_->info().vocab_size);
  GenerateOptions generate_options;
  generate_options.max_new_tokens = 12;
  const auto expected = generate(*model_, prompt, generate_options).output_ids;
  RequestParams params;
  params.max_tokens = 12;
  EXPECT_EQ(run_alone(*model_, {}, prompt, params), expected);
}

// 64 requests at once (chunked prefill, mixed lengths, some sampled with seeds) give each
// request exactly what it gives alone.
TEST_F(EngineTest, BatchedOutputsEqualRunningAlone) {
  EngineOptions options;
  options.prefill_chunk = 8;
  options.step_token_budget = 24;
  options.max_running = 16;  // the rest queue
  options.cache_blocks = 256;
  std::mt19937 rng(2);
  const int kRequests = 64;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    prompts.push_back(random_prompt(rng, 1 + int64_t(rng() % 30), model_->info().vocab_size));
    params[i].max_tokens = 1 + int64_t(rng() % 10);
    if (i % 4 == 3) params[i].sampling = {0.8f, 20, 0.9f, uint64_t(i)};
  }
  std::vector<Collector> collectors(kRequests);
  {
    Engine engine(*model_, nullptr, options);
    for (int i = 0; i < kRequests; ++i) engine.submit(prompts[i], params[i], collectors[i].callback());
    for (auto& collector : collectors) collector.wait();
    const EngineStats stats = engine.stats();
    EXPECT_EQ(stats.running, 0);
    EXPECT_EQ(stats.waiting, 0);
    EXPECT_EQ(stats.cache.blocks_used, 0);
    EXPECT_EQ(stats.cache.slots_used, 0);
    EXPECT_EQ(stats.requests_finished, kRequests);
  }
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(collectors[i].ids, run_alone(*model_, options, prompts[i], params[i])) << "request " << i;
    EXPECT_EQ(int64_t(collectors[i].ids.size()), params[i].max_tokens);
    EXPECT_EQ(collectors[i].last.finish_reason, FinishReason::kLength);
  }
}

TEST_F(EngineTest, RejectsWhatCanNeverFitAndQueuesTheRest) {
  EngineOptions options;
  options.cache_blocks = 4;  // 64 tokens in all
  options.block_size = 16;
  options.max_running = 4;
  Engine engine(*model_, nullptr, options);
  EXPECT_EQ(engine.max_request_tokens(), 64);
  RequestParams params;
  params.max_tokens = 40;
  std::mt19937 rng(3);
  const auto prompt = random_prompt(rng, 30, model_->info().vocab_size);
  Collector unused;
  EXPECT_THROW(engine.submit(prompt, params, unused.callback()), Error);  // 70 > 64
  EXPECT_THROW(engine.submit({}, params, unused.callback()), Error);
  EXPECT_THROW(engine.submit({1, 100000}, params, unused.callback()), Error);
  params.max_tokens = 0;
  EXPECT_THROW(engine.submit(prompt, params, unused.callback()), Error);
  // Three requests of 3 blocks each: they run one at a time, and all finish.
  params.max_tokens = 10;
  std::vector<Collector> collectors(3);
  for (auto& collector : collectors) engine.submit(prompt, params, collector.callback());
  for (auto& collector : collectors) {
    collector.wait();
    EXPECT_EQ(collector.ids.size(), 10u);
  }
  EXPECT_EQ(engine.stats().cache.blocks_used, 0);
}

TEST_F(EngineTest, CancelFreesTheCacheAtOnce) {
  EngineOptions options;
  Engine engine(*model_, nullptr, options);
  std::mt19937 rng(4);
  RequestParams params;
  params.max_tokens = 400;
  std::promise<void> first_token;
  std::atomic<bool> signalled{false};
  Collector collector;
  auto inner = collector.callback();
  const int64_t id = engine.submit(random_prompt(rng, 20, model_->info().vocab_size), params, [&](const TokenEvent& event) {
    inner(event);
    if (!signalled.exchange(true)) first_token.set_value();
  });
  first_token.get_future().wait();
  engine.cancel(id);
  collector.wait();
  EXPECT_EQ(collector.last.finish_reason, FinishReason::kCancelled);
  EXPECT_LT(collector.ids.size(), 400u);
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.cache.blocks_used, 0);
  EXPECT_EQ(stats.cache.slots_used, 0);
  EXPECT_EQ(stats.requests_cancelled, 1);
  engine.cancel(id);  // already gone: ignored
  engine.cancel(12345);
}

TEST_F(EngineTest, StopTokenEndsTheRequest) {
  std::mt19937 rng(5);
  const auto prompt = random_prompt(rng, 6, model_->info().vocab_size);
  RequestParams params;
  params.max_tokens = 12;
  const auto full = run_alone(*model_, {}, prompt, params);
  params.stop_token_ids = {full[3]};
  Engine engine(*model_, nullptr, {});
  Collector collector;
  engine.submit(prompt, params, collector.callback());
  collector.wait();
  const size_t first = size_t(std::find(full.begin(), full.end(), full[3]) - full.begin());
  EXPECT_EQ(collector.ids, std::vector<int32_t>(full.begin(), full.begin() + first + 1));
  EXPECT_EQ(collector.last.finish_reason, FinishReason::kStop);
}

TEST(StopStringFilter, HoldsBackPartialMatchesAndCutsAtTheStop) {
  StopStringFilter filter({"END", "\n\n"});
  EXPECT_EQ(filter.push("hello E").text, "hello ");
  EXPECT_EQ(filter.push("x").text, "Ex");
  auto result = filter.push("yz\n");
  EXPECT_EQ(result.text, "yz");
  EXPECT_FALSE(result.stopped);
  result = filter.push("\nmore");
  EXPECT_EQ(result.text, "");
  EXPECT_TRUE(result.stopped);
  EXPECT_EQ(filter.push("after").text, "");
  EXPECT_EQ(filter.finish(), "");

  StopStringFilter unfinished({"STOP"});
  EXPECT_EQ(unfinished.push("abcST").text, "abc");
  EXPECT_EQ(unfinished.finish(), "ST");
  StopStringFilter none({});
  EXPECT_EQ(none.push("abc").text, "abc");
  EXPECT_THROW(StopStringFilter({""}), Error);
}

}  // namespace
}  // namespace vt
