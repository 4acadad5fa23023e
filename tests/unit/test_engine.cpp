// The serving engine on the tiny golden Qwen3.5 model: greedy outputs equal generate() and do not
// depend on what else runs; admission, queueing, preemption by recompute, cancellation and stop
// tokens; seeds, logprobs and logit_bias; stop strings.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/logprobs.h"
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
  std::vector<TokenEvent> events;  // those with a token
  TokenEvent last;
  bool done = false;

  TokenCallback callback() {
    return [this](const TokenEvent& event) {
      std::lock_guard<std::mutex> lock(mutex);
      if (event.token_id >= 0) ids.push_back(event.token_id), events.push_back(event);
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

// A pool far too small for everyone: requests are admitted on what they hold, grow block by block,
// and the youngest is preempted when the pool runs dry. Each still gives exactly what it gives
// alone (greedy and seeded sampling), and everything is returned at the end.
TEST_F(EngineTest, PreemptionByRecomputeKeepsOutputsExact) {
  EngineOptions options;
  options.prefill_chunk = 8;
  options.step_token_budget = 24;
  options.max_running = 8;
  options.cache_blocks = 12;  // 96 tokens for 16 requests of up to 72 tokens each
  options.block_size = 8;
  std::mt19937 rng(6);
  const int kRequests = 16;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    prompts.push_back(random_prompt(rng, 4 + int64_t(rng() % 20), model_->info().vocab_size));
    params[i].max_tokens = 20 + int64_t(rng() % 30);
    if (i % 3 == 2) params[i].sampling = {1.0f, 0, 0.95f, uint64_t(100 + i)};
  }
  std::vector<Collector> collectors(kRequests);
  EngineStats stats;
  {
    Engine engine(*model_, nullptr, options);
    for (int i = 0; i < kRequests; ++i) engine.submit(prompts[i], params[i], collectors[i].callback());
    for (auto& collector : collectors) collector.wait();
    stats = engine.stats();
  }
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_GT(stats.recomputed_tokens, 0);
  EXPECT_EQ(stats.requests_finished, kRequests);
  EXPECT_EQ(stats.running + stats.waiting + stats.cache.blocks_used + stats.cache.slots_used, 0);
  EngineOptions alone = options;
  alone.cache_blocks = 64;
  alone.reservation = EngineOptions::Reservation::kFull;
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(collectors[i].ids, run_alone(*model_, alone, prompts[i], params[i])) << "request " << i;
    EXPECT_EQ(int64_t(collectors[i].ids.size()), params[i].max_tokens);
  }
}

// With full reservation nothing is ever preempted: requests wait for memory instead.
TEST_F(EngineTest, FullReservationNeverPreempts) {
  EngineOptions options;
  options.prefill_chunk = 8;
  options.step_token_budget = 24;
  options.cache_blocks = 12;
  options.block_size = 8;
  options.reservation = EngineOptions::Reservation::kFull;
  std::mt19937 rng(7);
  std::vector<Collector> collectors(6);
  Engine engine(*model_, nullptr, options);
  RequestParams params;
  params.max_tokens = 30;
  for (auto& collector : collectors)
    engine.submit(random_prompt(rng, 10, model_->info().vocab_size), params, collector.callback());
  for (auto& collector : collectors) collector.wait();
  EXPECT_EQ(engine.stats().preemptions, 0);
  EXPECT_EQ(engine.stats().cache.blocks_used, 0);
}

// A request's seed fixes its sampled output whatever else runs; another seed gives another output.
TEST_F(EngineTest, SeedIsPerRequest) {
  std::mt19937 rng(8);
  const auto prompt = random_prompt(rng, 7, model_->info().vocab_size);
  RequestParams params;
  params.max_tokens = 24;
  params.sampling = {1.5f, 0, 1.0f, 1234};
  const auto first = run_alone(*model_, {}, prompt, params);
  EXPECT_EQ(run_alone(*model_, {}, prompt, params), first);
  params.sampling.seed = 1235;
  EXPECT_NE(run_alone(*model_, {}, prompt, params), first);
}

// Logprobs are the log-softmax of the model's logits (plus logit_bias) at each step; greedy takes
// the top one; a bias of -100 removes a token and +100 forces one.
TEST_F(EngineTest, LogprobsAndLogitBias) {
  std::mt19937 rng(9);
  const int64_t vocab = model_->info().vocab_size;
  const auto prompt = random_prompt(rng, 9, vocab);
  // The first token's distribution, straight from the model.
  auto state = model_->new_sequence(16);
  Buffer logits(DType::kF32, {1, vocab});
  model_->forward(prompt, *state, logits, {});
  double total = 0;
  const float* values = logits.f32();
  const float max_logit = values[argmax(values, vocab)];
  for (int64_t i = 0; i < vocab; ++i) total += std::exp(double(values[i] - max_logit));
  auto expected_logprob = [&](int32_t id) { return double(values[id] - max_logit) - std::log(total); };

  RequestParams params;
  params.max_tokens = 6;
  params.logprobs = 3;
  Engine engine(*model_, nullptr, {});
  Collector greedy;
  engine.submit(prompt, params, greedy.callback());
  greedy.wait();
  ASSERT_EQ(greedy.events.size(), 6u);
  for (const TokenEvent& event : greedy.events) {
    ASSERT_EQ(event.top_logprobs.size(), 3u);
    EXPECT_EQ(event.top_logprobs[0].token_id, event.token_id);  // greedy takes the most likely
    EXPECT_EQ(event.top_logprobs[0].logprob, event.logprob);
    EXPECT_GE(event.top_logprobs[0].logprob, event.top_logprobs[1].logprob);
    EXPECT_GE(event.top_logprobs[1].logprob, event.top_logprobs[2].logprob);
    EXPECT_LE(event.logprob, 0.0f);
  }
  const TokenEvent& first = greedy.events[0];
  EXPECT_EQ(first.token_id, argmax(values, vocab));
  EXPECT_NEAR(first.logprob, expected_logprob(first.token_id), 1e-4);
  EXPECT_NEAR(first.top_logprobs[2].logprob, expected_logprob(first.top_logprobs[2].token_id), 1e-4);

  // -100 on the greedy choice: the runner-up comes first, its logprob from the biased logits.
  params.logit_bias = {{first.token_id, -100.0f}};
  Collector banned;
  engine.submit(prompt, params, banned.callback());
  banned.wait();
  EXPECT_EQ(banned.ids[0], first.top_logprobs[1].token_id);
  for (int32_t id : banned.ids) EXPECT_NE(id, first.token_id);
  // +100 on one token: every step picks it.
  const int32_t forced = int32_t((first.token_id + 7) % vocab);
  params.logit_bias = {{forced, 100.0f}};
  params.logprobs = -1;
  Collector pushed;
  engine.submit(prompt, params, pushed.callback());
  pushed.wait();
  EXPECT_EQ(pushed.ids, std::vector<int32_t>(6, forced));
  EXPECT_TRUE(pushed.events[0].top_logprobs.empty());
  // Out-of-range logit_bias and logprobs are refused.
  params.logit_bias = {{int32_t(vocab), 1.0f}};
  EXPECT_THROW(engine.submit(prompt, params, pushed.callback()), Error);
  params.logit_bias = {};
  params.logprobs = 21;
  EXPECT_THROW(engine.submit(prompt, params, pushed.callback()), Error);
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

TEST(Logprobs, AreTheLogSoftmax) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -50.0f};
  double total = 0;
  for (float value : logits) total += std::exp(double(value));
  std::vector<TokenLogprob> top;
  const TokenLogprob chosen = token_logprobs(logits.data(), 5, 2, 3, top);
  EXPECT_EQ(chosen.token_id, 2);
  EXPECT_NEAR(chosen.logprob, 2.0 - std::log(total), 1e-6);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token_id, 1);  // ties to the lower id
  EXPECT_EQ(top[1].token_id, 3);
  EXPECT_EQ(top[2].token_id, 2);
  EXPECT_NEAR(top[0].logprob, 3.0 - std::log(total), 1e-6);
  token_logprobs(logits.data(), 5, 4, 0, top);
  EXPECT_TRUE(top.empty());
  token_logprobs(logits.data(), 5, 4, 9, top);  // more than the vocabulary: all of it
  EXPECT_EQ(top.size(), 5u);
  EXPECT_EQ(top.back().token_id, 4);
  EXPECT_THROW(token_logprobs(logits.data(), 5, 5, 1, top), Error);
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
