// The serving engine on the tiny golden Qwen3.5 model: greedy outputs equal generate() and do not
// depend on what else runs; admission, queueing, preemption by recompute, cancellation and stop
// tokens; seeds, logprobs and logit_bias; stop strings. Speculative decoding in the batch: greedy
// outputs (and logprobs) identical to plain decoding for k = 1..8, alone and 16 at once mixed with
// plain requests, through preemption; seeded sampled outputs independent of the load; the sampled
// distribution the target's (chi-square); stop tokens and max_tokens inside accepted drafts; the
// statistics and their /metrics rendering; bad options refused. The MTP drafter in the batch
// (a fitted head): greedy outputs identical to plain decoding for k = 1..8, alone and 16 at once
// mixed with plain requests, through preemption and cancellation, drafts accepted; the target
// sequences never keep more hidden states than one step's; the sampled distribution the target's.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "../speculative/mtp_test_support.h"
#include "../speculative/spec_test_support.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/logprobs.h"
#include "engine/stop_strings.h"
#include "model/faulty_model.h"
#include "model/generate.h"
#include "models/qwen3_5/model.h"
#include "models/registry.h"
#include "server/metrics.h"
#include "speculative/draft_model_drafter.h"
#include "speculative/mtp_drafter.h"

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

// The preemption tests' pool, far too small for their requests at once: 12 blocks of 8 tokens,
// prompt chunks of 8, 24 tokens a step, up to 8 running.
EngineOptions with_tiny_pool(EngineOptions options) {
  options.prefill_chunk = 8;
  options.step_token_budget = 24;
  options.max_running = 8;
  options.cache_blocks = 12;
  options.block_size = 8;
  return options;
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
  const EngineOptions options = with_tiny_pool({});  // 96 tokens for 16 requests of up to 72 tokens each
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

// Every step is recorded: in the histogram /metrics renders (its buckets hold every step, its
// forwards' time within the wall time) and as one JSON line of the step trace; the prompt's tokens
// are prefill tokens, the tokens fed after it decode tokens.
TEST_F(EngineTest, EveryStepIsRecordedAndTraced) {
  EngineOptions options;
  options.prefill_chunk = 8;
  options.step_token_budget = 24;
  options.step_trace = ::testing::TempDir() + "engine_steps.jsonl";
  std::mt19937 rng(11);
  std::vector<Collector> collectors(3);
  EngineStats stats;
  {
    Engine engine(*model_, nullptr, options);
    for (auto& collector : collectors) {
      RequestParams params;
      params.max_tokens = 6;
      engine.submit(random_prompt(rng, 13, model_->info().vocab_size), params, collector.callback());
    }
    for (auto& collector : collectors) collector.wait();
    stats = engine.stats();
  }
  ASSERT_GT(stats.steps, 0);
  EXPECT_EQ(stats.step.count, stats.steps);
  int64_t in_buckets = 0;
  for (int64_t bucket : stats.step.buckets) in_buckets += bucket;
  EXPECT_EQ(in_buckets, stats.steps);
  EXPECT_GT(stats.step.forward_seconds, 0.0);
  EXPECT_LE(stats.step.forward_seconds, stats.step.wall_seconds);
  EXPECT_EQ(stats.step.prefill_tokens, 3 * 13);
  EXPECT_EQ(stats.step.decode_tokens, 3 * 5);  // the first token comes from the prompt's last chunk
  EXPECT_EQ(stats.step.verify_tokens, 0);
  std::ifstream trace(options.step_trace);
  int64_t lines = 0, prefill = 0;
  for (std::string line; std::getline(trace, line); ++lines) {
    const auto step = nlohmann::json::parse(line);
    EXPECT_GE(step.at("wall_ms").get<double>(), step.at("forward_ms").get<double>());
    EXPECT_GE(step.at("host_ms").get<double>(), 0.0);
    prefill += step.at("prefill_tokens").get<int64_t>();
  }
  EXPECT_EQ(lines, stats.steps);
  EXPECT_EQ(prefill, 3 * 13);
  const std::string metrics = server::ServerMetrics().render(stats, 0);
  EXPECT_NE(metrics.find("vt_engine_step_duration_seconds_count " + std::to_string(stats.steps)), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("vt_engine_step_tokens_total{kind=\"prefill\"} 39"), std::string::npos);
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

// Presence, frequency and repetition penalties: greedy ids and logprobs as a step-by-step decode
// that applies logit_bias and then vLLM's definitions to the model's logits gives them. Three
// favoured tokens would otherwise repeat; the penalties change the output.
TEST_F(EngineTest, PenaltiesFollowTheirDefinitions) {
  std::mt19937 rng(31);
  const int64_t vocab = model_->info().vocab_size;
  const auto prompt = random_prompt(rng, 9, vocab);
  const std::vector<std::pair<int32_t, float>> favoured = {{prompt[0], 6.0f}, {17, 6.0f}, {40, 6.0f}};
  const auto reference = [&](const Penalties& penalties, int64_t steps) {
    auto state = model_->new_sequence(64);
    Buffer logits(DType::kF32, {1, vocab});
    model_->forward(prompt, *state, logits, {});
    std::vector<int32_t> out;
    std::vector<float> logprobs;
    for (int64_t step = 0; step < steps; ++step) {
      std::vector<float> row(logits.f32(), logits.f32() + vocab);
      for (const auto& [token, bias] : favoured) row[size_t(token)] += bias;
      for (int32_t token = 0; token < vocab; ++token) {
        const int64_t count = std::count(out.begin(), out.end(), token);
        const bool seen = count > 0 || std::count(prompt.begin(), prompt.end(), token) > 0;
        float& x = row[size_t(token)];
        if (seen) x = x > 0 ? x / penalties.repetition : x * penalties.repetition;
        if (count > 0) x -= penalties.presence + penalties.frequency * float(count);
      }
      const int32_t id = argmax(row.data(), vocab);
      const float top = row[size_t(id)];
      double total = 0;
      for (float x : row) total += std::exp(double(x - top));
      out.push_back(id);
      logprobs.push_back(float(-std::log(total)));
      model_->forward(std::vector<int32_t>{id}, *state, logits, {});
    }
    return std::pair{out, logprobs};
  };
  Engine engine(*model_, nullptr, {});
  std::vector<int32_t> plain_ids;
  for (const Penalties& penalties : {Penalties{}, Penalties{1.5f, 0.0f, 1.0f}, Penalties{0.0f, 1.2f, 1.0f},
                                     Penalties{0.0f, 0.0f, 1.8f}, Penalties{-0.5f, 0.8f, 1.4f}}) {
    SCOPED_TRACE(::testing::Message() << "presence " << penalties.presence << " frequency " << penalties.frequency
                                      << " repetition " << penalties.repetition);
    RequestParams params;
    params.max_tokens = 14;
    params.logprobs = 0;
    params.logit_bias = favoured;
    params.penalties = penalties;
    Collector got;
    engine.submit(prompt, params, got.callback());
    got.wait();
    const auto [ids, logprobs] = reference(penalties, params.max_tokens);
    EXPECT_EQ(got.ids, ids);
    ASSERT_EQ(got.events.size(), logprobs.size());
    for (size_t t = 0; t < logprobs.size(); ++t) EXPECT_NEAR(got.events[t].logprob, logprobs[t], 1e-4) << t;
    if (!penalties.any()) plain_ids = got.ids;
    else EXPECT_NE(got.ids, plain_ids);
  }
  RequestParams params;
  for (const Penalties& bad : {Penalties{2.5f, 0.0f, 1.0f}, Penalties{0.0f, -3.0f, 1.0f}, Penalties{0.0f, 0.0f, 0.0f}}) {
    params.penalties = bad;
    Collector unused;
    EXPECT_THROW(engine.submit(prompt, params, unused.callback()), Error);
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

// ---- Speculative decoding inside continuous batching ----

// The target's own drafts (a draft model run on a second copy of the target). With make_wrong,
// greedy drafts get one token made wrong at a position that cycles through 0..max_tokens
// (max_tokens: none wrong), so verification accepts every prefix length in turn.
class OracleDrafter final : public Drafter {
 public:
  OracleDrafter(Model& copy, const SamplingParams& sampling, bool make_wrong)
      : oracle_(copy, sampling), vocab_(copy.info().vocab_size), make_wrong_(make_wrong) {}
  std::string name() const override { return "oracle"; }
  void start(std::span<const int32_t> prompt, int64_t max_length) override { oracle_.start(prompt, max_length); }
  void propose(std::span<const int32_t> context, int64_t max_tokens, Draft& draft) override {
    oracle_.propose(context, max_tokens, draft);
    const size_t wrong = size_t(calls_++ % (max_tokens + 1));
    if (make_wrong_ && wrong < draft.tokens.size() && draft.probs.empty())
      draft.tokens[wrong] = int32_t((draft.tokens[wrong] + 1) % vocab_);
  }

 private:
  DraftModelDrafter oracle_;
  int64_t vocab_, calls_ = 0;
  bool make_wrong_;
};

// Proposes `max_tokens` copies of one token: drafts the target's greedy choice rarely accepts.
class WrongDrafter final : public Drafter {
 public:
  std::string name() const override { return "wrong"; }
  void start(std::span<const int32_t>, int64_t) override {}
  void propose(std::span<const int32_t>, int64_t max_tokens, Draft& draft) override {
    draft.tokens.assign(size_t(max_tokens), 3);
    draft.probs.clear();
  }
};

// Proposes the continuation a test already knows (the plain greedy output): always right.
class ScriptedDrafter final : public Drafter {
 public:
  ScriptedDrafter(size_t prompt_size, std::vector<int32_t> script) : prompt_size_(prompt_size), script_(std::move(script)) {}
  std::string name() const override { return "scripted"; }
  void start(std::span<const int32_t>, int64_t) override {}
  void propose(std::span<const int32_t> context, int64_t max_tokens, Draft& draft) override {
    draft.tokens.clear();
    draft.probs.clear();
    const size_t done = context.size() - prompt_size_;
    for (size_t i = done; i < script_.size() && int64_t(i - done) < max_tokens; ++i) draft.tokens.push_back(script_[i]);
  }

 private:
  size_t prompt_size_;
  std::vector<int32_t> script_;
};

struct Outcome {
  std::vector<int32_t> ids;
  std::vector<TokenEvent> events;
  TokenEvent last;
};

// Runs the requests at once on one engine; returns each one's outcome and the engine's stats.
std::vector<Outcome> run_all(Model& model, const EngineOptions& options, const std::vector<std::vector<int32_t>>& prompts,
                             const std::vector<RequestParams>& params, EngineStats* stats = nullptr) {
  std::vector<Collector> collectors(prompts.size());
  {
    Engine engine(model, nullptr, options);
    for (size_t i = 0; i < prompts.size(); ++i) engine.submit(prompts[i], params[i], collectors[i].callback());
    for (auto& collector : collectors) collector.wait();
    if (stats) *stats = engine.stats();
  }
  std::vector<Outcome> outcomes;
  for (auto& collector : collectors) outcomes.push_back({collector.ids, collector.events, collector.last});
  return outcomes;
}

// Each request of `together` (run at once under `options`) ended without an error and gave what it
// gives alone with every block reserved up front; with `full_length`, all max_tokens of it.
void expect_each_as_alone(Model& model, const EngineOptions& options, const std::vector<std::vector<int32_t>>& prompts,
                          const std::vector<RequestParams>& params, const std::vector<Outcome>& together,
                          bool full_length) {
  EngineOptions alone = options;
  alone.cache_blocks = 64;
  alone.reservation = EngineOptions::Reservation::kFull;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(together[i].last.error, "") << "request " << i;
    EXPECT_EQ(together[i].ids, run_all(model, alone, {prompts[i]}, {params[i]})[0].ids) << "request " << i;
    if (full_length) {
      EXPECT_EQ(int64_t(together[i].ids.size()), params[i].max_tokens) << "request " << i;
    }
  }
}

// The statistics' own arithmetic, and with no stop tokens every step makes its accepted drafts
// plus one token: emitted = accepted + steps.
void check_spec_stats(const SpeculativeStats& stats, bool stops_possible) {
  int64_t steps = 0, accepted = 0, drafted = 0;
  for (size_t a = 0; a < stats.accepted_histogram.size(); ++a)
    steps += stats.accepted_histogram[a], accepted += int64_t(a) * stats.accepted_histogram[a];
  for (size_t i = 0; i < stats.drafted_at.size(); ++i) {
    drafted += stats.drafted_at[i];
    EXPECT_LE(stats.accepted_at[i], stats.drafted_at[i]);
    if (i > 0) {
      EXPECT_LE(stats.drafted_at[i], stats.drafted_at[i - 1]);
      EXPECT_LE(stats.accepted_at[i], stats.accepted_at[i - 1]);
    }
  }
  EXPECT_EQ(steps, stats.steps);
  EXPECT_EQ(accepted, stats.accepted);
  EXPECT_EQ(drafted, stats.drafted);
  int64_t accepted_by_position = 0;
  for (int64_t count : stats.accepted_at) accepted_by_position += count;
  EXPECT_EQ(accepted_by_position, stats.accepted);
  if (!stops_possible) {
    EXPECT_EQ(stats.emitted, stats.accepted + stats.steps);
  } else {
    EXPECT_LE(stats.emitted, stats.accepted + stats.steps);
  }
}

class EngineSpecTest : public EngineTest {
 protected:
  static void SetUpTestSuite() {
    EngineTest::SetUpTestSuite();
    copy_ = load_model(kModelDir, {}).release();
  }
  static void TearDownTestSuite() {
    delete copy_;
    EngineTest::TearDownTestSuite();
  }
  // Engine options whose drafter is the oracle on the target's copy (or the n-gram drafter).
  static EngineOptions spec_options(int64_t max_num_draft, bool oracle, SamplingParams draft_sampling = {}) {
    EngineOptions options;
    options.max_num_draft = max_num_draft;
    if (oracle)
      options.make_drafter = [draft_sampling](const RequestParams&) {
        return std::make_unique<OracleDrafter>(*copy_, draft_sampling, true);
      };
    return options;
  }
  static Model* copy_;
};
Model* EngineSpecTest::copy_ = nullptr;

// Prompts: random ones, and one that repeats itself (n-gram drafts find matches in it).
std::vector<std::vector<int32_t>> spec_prompts(int64_t vocab) {
  std::mt19937 rng(21);
  std::vector<std::vector<int32_t>> prompts = {random_prompt(rng, 11, vocab), random_prompt(rng, 5, vocab)};
  auto motif = random_prompt(rng, 6, vocab);
  std::vector<int32_t> repeated;
  for (int i = 0; i < 4; ++i) repeated.insert(repeated.end(), motif.begin(), motif.end());
  prompts.push_back(repeated);
  return prompts;
}

// Batch 1: for k = 1..8, the n-gram and the oracle drafter give exactly the plain greedy ids and
// logprobs (the verify's rows are the decode's logits), and the oracle's drafts are accepted at
// every prefix length. The random tiny model never repeats itself, so a logit_bias (applied to
// every verify row) makes outputs the n-gram drafter can predict: one token forced, or a few
// favoured; and a few favoured under penalties (each verify row penalised after the drafts before it).
TEST_F(EngineSpecTest, GreedyAloneIdenticalToPlainForEveryK) {
  const int64_t vocab = model_->info().vocab_size;
  SpeculativeStats oracle_totals;
  oracle_totals.reset(8);
  int64_t ngram_accepted = 0, ngram_drafted = 0;
  const std::vector<std::vector<std::pair<int32_t, float>>> biases = {
      {}, {{17, 100.0f}}, {{17, 6.0f}, {40, 6.0f}, {99, 6.0f}}, {{17, 6.0f}, {40, 6.0f}, {99, 6.0f}}};
  const auto prompts = spec_prompts(vocab);
  for (size_t case_index = 0; case_index < prompts.size() + 3; ++case_index) {
    const auto& prompt = prompts[std::min(case_index, prompts.size() - 1)];
    RequestParams plain;
    plain.max_tokens = 48;
    plain.logprobs = 3;
    plain.logit_bias = biases[case_index < prompts.size() ? 0 : case_index - prompts.size() + 1];
    if (case_index == prompts.size() + 2) plain.penalties = {0.5f, 0.7f, 1.3f};
    const Outcome want = run_all(*model_, {}, {prompt}, {plain})[0];
    ASSERT_EQ(int64_t(want.ids.size()), plain.max_tokens);
    for (int64_t k = 1; k <= 8; ++k) {
      for (bool oracle : {false, true}) {
        SCOPED_TRACE("case " + std::to_string(case_index) + " k " + std::to_string(k) +
                     (oracle ? " oracle" : " ngram"));
        RequestParams params = plain;
        params.num_draft = k;
        EngineStats stats;
        const Outcome got = run_all(*model_, spec_options(8, oracle), {prompt}, {params}, &stats)[0];
        EXPECT_EQ(got.ids, want.ids);
        ASSERT_EQ(got.events.size(), want.events.size());
        for (size_t t = 0; t < got.events.size(); ++t) {
          EXPECT_EQ(got.events[t].logprob, want.events[t].logprob) << "token " << t;
          ASSERT_EQ(got.events[t].top_logprobs.size(), 3u);
          for (size_t j = 0; j < 3; ++j) {
            EXPECT_EQ(got.events[t].top_logprobs[j].token_id, want.events[t].top_logprobs[j].token_id);
            EXPECT_EQ(got.events[t].top_logprobs[j].logprob, want.events[t].top_logprobs[j].logprob);
          }
          EXPECT_EQ(got.events[t].completion_tokens, int64_t(t) + 1);
        }
        EXPECT_EQ(got.last.finish_reason, FinishReason::kLength);
        const SpeculativeStats& spec = stats.speculative;
        check_spec_stats(spec, false);
        // The first token comes from the prefill; every later one from a verify step.
        EXPECT_EQ(spec.emitted, plain.max_tokens - 1);
        EXPECT_EQ(stats.generation_tokens_total, plain.max_tokens);
        EXPECT_EQ(spec.steps, stats.steps - 1);  // the prefill step, then one verify step each
        for (size_t i = size_t(k); i < spec.drafted_at.size(); ++i) EXPECT_EQ(spec.drafted_at[i], 0);
        if (oracle && case_index < prompts.size()) {  // (the oracle knows no logit_bias)
          EXPECT_GT(spec.accepted, 0);
          EXPECT_LT(spec.steps, plain.max_tokens - 1);  // several tokens per step
          for (size_t a = 0; a < spec.accepted_histogram.size(); ++a)
            oracle_totals.accepted_histogram[a] += spec.accepted_histogram[a];
        } else if (!oracle) {
          ngram_accepted += spec.accepted, ngram_drafted += spec.drafted;
          if (case_index == prompts.size()) {  // one token forced: drafts of it are right
            EXPECT_GT(spec.accepted, plain.max_tokens / 3);
            EXPECT_LT(spec.steps, (plain.max_tokens - 1) * 2 / 3);
          }
        }
      }
    }
  }
  std::printf("oracle: steps by drafts accepted");
  for (int64_t count : oracle_totals.accepted_histogram) std::printf(" %lld", static_cast<long long>(count));
  std::printf("; n-gram drafts accepted %lld of %lld\n", static_cast<long long>(ngram_accepted),
              static_cast<long long>(ngram_drafted));
  for (int64_t a = 0; a <= 8; ++a) EXPECT_GT(oracle_totals.accepted_histogram[size_t(a)], 0) << a << " accepted";
  EXPECT_GT(ngram_accepted, 0);
  EXPECT_LT(ngram_accepted, ngram_drafted);
}

// 16 requests at once on a tight budget (verify steps wait for room): speculating ones (k = 1..8,
// some adaptive) and plain ones, greedy and seeded. Greedy outputs equal plain decoding; a seeded
// speculating request gives what it gives alone; plain ones what they give alone.
TEST_F(EngineSpecTest, SixteenMixedRequestsEqualRunningAlone) {
  const int64_t vocab = model_->info().vocab_size;
  for (bool oracle : {true, false}) {
    SCOPED_TRACE(oracle ? "oracle" : "ngram");
    EngineOptions options = spec_options(8, oracle);
    options.prefill_chunk = 8;
    options.step_token_budget = 24;
    options.max_running = 16;
    options.cache_blocks = 256;
    std::mt19937 rng(31);
    const int kRequests = 16;
    std::vector<std::vector<int32_t>> prompts;
    std::vector<RequestParams> params(kRequests);
    for (int i = 0; i < kRequests; ++i) {
      prompts.push_back(random_prompt(rng, 1 + int64_t(rng() % 30), vocab));
      params[i].max_tokens = 5 + int64_t(rng() % 26);
      if (i % 2 == 0) params[i].num_draft = 1 + (i / 2) % 8;
      params[i].adaptive_draft = i % 4 == 0;
      if (i % 3 == 2) params[i].sampling = {0.9f, 0, 0.95f, uint64_t(500 + i)};
      if (i % 5 == 1) params[i].logprobs = 2;
    }
    EngineStats stats;
    const auto together = run_all(*model_, options, prompts, params, &stats);
    int64_t spec_completion = 0, total_completion = 0, spec_requests = 0;
    for (int i = 0; i < kRequests; ++i) {
      SCOPED_TRACE("request " + std::to_string(i));
      ASSERT_EQ(int64_t(together[i].ids.size()), params[i].max_tokens);
      EXPECT_EQ(together[i].ids, run_all(*model_, options, {prompts[i]}, {params[i]})[0].ids);
      if (params[i].sampling.temperature == 0) {
        RequestParams plain = params[i];
        plain.num_draft = 0;
        EXPECT_EQ(together[i].ids, run_all(*model_, options, {prompts[i]}, {plain})[0].ids);
      }
      total_completion += int64_t(together[i].ids.size());
      if (params[i].num_draft > 0) spec_completion += int64_t(together[i].ids.size()), ++spec_requests;
    }
    check_spec_stats(stats.speculative, false);
    EXPECT_EQ(stats.generation_tokens_total, total_completion);
    EXPECT_EQ(stats.speculative.emitted, spec_completion - spec_requests);
    EXPECT_EQ(stats.running + stats.waiting + stats.cache.blocks_used + stats.cache.slots_used, 0);
    if (oracle) {
      EXPECT_GT(stats.speculative.accepted, stats.speculative.drafted / 10);
    }
    EXPECT_GT(stats.speculative.steps, 0);
  }
}

// A model whose batched forwards take `fixed` seconds plus `per_token` per token (sleeping before
// the real forward): the two regimes of a step's cost, weights-bound and compute-bound.
class TimedModel : public FaultyModel {
 public:
  TimedModel(Model& inner, double fixed, double per_token) : FaultyModel(inner, 0), fixed_(fixed), per_token_(per_token) {}
  void forward_batch(std::span<const BatchItem> items, const TensorView& logits) override {
    wait(items);
    FaultyModel::forward_batch(items, logits);
  }
  void forward_batch_sample(std::span<const BatchItem> items, std::span<const RowOutput> rows,
                            std::span<int32_t> tokens, const TensorView& logits) override {
    wait(items);
    FaultyModel::forward_batch_sample(items, rows, tokens, logits);
  }

 private:
  void wait(std::span<const BatchItem> items) const {
    int64_t tokens = 0;
    for (const BatchItem& item : items) tokens += int64_t(item.tokens.size());
    std::this_thread::sleep_for(std::chrono::duration<double>(fixed_ + per_token_ * double(tokens)));
  }
  double fixed_, per_token_;
};

// Speculation by load: where a step's cost is flat, requests whose drafts are often accepted (the
// oracle drafter) draft (only the step that measures plain decoding declines, and explorations);
// where the cost grows with the tokens, drafts that are rarely accepted (WrongDrafter) give fewer
// tokens per second than they cost and the policy declines nearly every step. A seeded sampled request
// drafts as asked either way; greedy outputs equal plain decoding's in both.
TEST_F(EngineSpecTest, SpeculationByLoadDraftsWhereItPays) {
  const int64_t vocab = model_->info().vocab_size;
  std::mt19937 rng(47);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params(4);
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(random_prompt(rng, 6, vocab));
    params[i].max_tokens = 40;
    params[i].num_draft = 4;
  }
  params[3].sampling = {0.9f, 0, 1.0f, 77};
  params[3].seeded = true;
  for (bool flat : {true, false}) {
    SCOPED_TRACE(flat ? "flat cost" : "cost per token");
    // Costs well above a loaded CI machine's scheduling noise (a step delayed by tens of ms there
    // moved the per-token case's averages: it failed once under ctest -j 2).
    TimedModel timed(*model_, flat ? 0.030 : 0.0, flat ? 0.0 : 0.008);
    EngineOptions options = spec_options(4, true);
    if (!flat) options.make_drafter = [](const RequestParams&) { return std::make_unique<WrongDrafter>(); };
    options.speculation_by_load = true;
    EngineStats stats;
    const auto outcomes = run_all(timed, options, prompts, params, &stats);
    for (int i = 0; i < 3; ++i) {
      RequestParams plain = params[i];
      plain.num_draft = 0;
      EXPECT_EQ(outcomes[i].ids, run_all(*model_, {}, {prompts[i]}, {plain})[0].ids) << "request " << i;
    }
    EXPECT_EQ(int64_t(outcomes[3].ids.size()), params[3].max_tokens);
    const SpeculativeStats& spec = stats.speculative;
    std::printf("%s: %lld verify steps, %lld declined, %lld drafted, %lld accepted\n", flat ? "flat" : "per token",
                (long long)spec.steps, (long long)spec.declined_by_load, (long long)spec.drafted, (long long)spec.accepted);
    if (flat) {
      // Declined: the one step that measures plain decoding, and the periodic explorations.
      EXPECT_LE(spec.declined_by_load, 3 * (spec.steps / SpeculationLoadPolicy::kExploreEvery + 2));
      EXPECT_GT(spec.accepted, 3 * 15);
    } else {
      // Three candidates a step for ~40 steps; the first step (no cost measured yet) and the
      // explorations draft.
      EXPECT_GE(spec.declined_by_load, 3 * 40 * 3 / 4);
    }
  }
}

// A pool far too small: speculating requests (greedy and seeded) are preempted and recomputed,
// their verify steps reserve the blocks the drafts write, and each gives what it gives alone.
TEST_F(EngineSpecTest, PreemptionByRecomputeKeepsOutputsExact) {
  const EngineOptions options = with_tiny_pool(spec_options(6, true));
  std::mt19937 rng(16);
  const int kRequests = 12;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    prompts.push_back(random_prompt(rng, 4 + int64_t(rng() % 20), model_->info().vocab_size));
    params[i].max_tokens = 20 + int64_t(rng() % 30);
    params[i].num_draft = i % 4 == 3 ? 0 : 2 + i % 5;
    if (i % 3 == 2) params[i].sampling = {1.0f, 0, 0.95f, uint64_t(300 + i)};
  }
  EngineStats stats;
  const auto together = run_all(*model_, options, prompts, params, &stats);
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_GT(stats.recomputed_tokens, 0);
  EXPECT_EQ(stats.requests_finished, kRequests);
  EXPECT_EQ(stats.running + stats.waiting + stats.cache.blocks_used + stats.cache.slots_used, 0);
  check_spec_stats(stats.speculative, false);
  expect_each_as_alone(*model_, options, prompts, params, together, true);
}

// Stop tokens and max_tokens when several tokens are accepted in one step: the drafter is always
// right, so the stop token arrives as an accepted draft; the output ends exactly where plain
// decoding ends, with the same finish reasons.
TEST_F(EngineSpecTest, StopTokenAndLengthInsideAcceptedDrafts) {
  std::mt19937 rng(41);
  const auto prompt = random_prompt(rng, 8, model_->info().vocab_size);
  RequestParams params;
  params.max_tokens = 30;
  const auto full = run_alone(*model_, {}, prompt, params);
  EngineOptions options;
  options.max_num_draft = 8;
  options.make_drafter = [&](const RequestParams&) { return std::make_unique<ScriptedDrafter>(prompt.size(), full); };
  const size_t first = size_t(std::find(full.begin(), full.end(), full[9]) - full.begin());
  ASSERT_GT(first, 0u);
  int64_t stops_on_a_draft = 0;
  for (int64_t k : {1, 2, 3, 4, 8}) {
    SCOPED_TRACE("k " + std::to_string(k));
    RequestParams stop = params;
    stop.num_draft = k;
    stop.stop_token_ids = {full[9]};
    EngineStats stats;
    const Outcome got = run_all(*model_, options, {prompt}, {stop}, &stats)[0];
    EXPECT_EQ(got.ids, std::vector<int32_t>(full.begin(), full.begin() + first + 1));
    EXPECT_EQ(got.last.finish_reason, FinishReason::kStop);
    EXPECT_EQ(got.last.completion_tokens, int64_t(first) + 1);
    check_spec_stats(stats.speculative, true);
    // Steps of k drafts and a bonus after the prefill's token: the stop is a draft unless it is a
    // bonus, and then its step made only its accepted drafts; the drafts after it go unverified.
    // Every draft the stop did not cut off is accepted (the drafter is always right).
    const size_t offset = (first - 1) % size_t(k + 1);
    const bool on_draft = offset < size_t(k);
    stops_on_a_draft += on_draft;
    EXPECT_EQ(stats.speculative.drafted - stats.speculative.accepted, on_draft ? k - int64_t(offset) - 1 : 0);
    EXPECT_EQ(stats.speculative.emitted, stats.speculative.accepted + stats.speculative.steps - (on_draft ? 1 : 0));
    for (int64_t max_tokens : {1, 2, 5, 17}) {
      RequestParams length = params;
      length.num_draft = k;
      length.max_tokens = max_tokens;
      const Outcome short_run = run_all(*model_, options, {prompt}, {length})[0];
      EXPECT_EQ(short_run.ids, std::vector<int32_t>(full.begin(), full.begin() + max_tokens)) << max_tokens;
      EXPECT_EQ(short_run.last.finish_reason, FinishReason::kLength);
    }
  }
  EXPECT_GT(stops_on_a_draft, 0);
}

// Sampling stays exact: the joint distribution of the first three tokens (temperature 1, top-k 3:
// 27 sequences) of 2000 seeded requests run at once, speculating with k = 2, is the target's
// (chi-square at the 0.999 quantile), with greedy drafts (q a point mass) and sampled ones (dense q).
// A seeded request also repeats itself exactly.
TEST_F(EngineSpecTest, SampledDistributionIsTheTargets) {
  const int64_t vocab = model_->info().vocab_size;
  std::mt19937 rng(51);
  const auto prompt = random_prompt(rng, 10, vocab);
  const SamplingParams sampling = testing::three_token_sampling();
  const auto expected = testing::first_three_token_distribution(*model_, prompt);
  ASSERT_EQ(expected.size(), 27u);
  for (const SamplingParams& draft_sampling : {SamplingParams{}, SamplingParams{1.5f, 5, 1.0f, 99}}) {
    const bool dense = draft_sampling.temperature > 0;
    SCOPED_TRACE(dense ? "dense q" : "point-mass q");
    EngineOptions options;
    options.max_num_draft = 2;
    options.max_running = 64;
    // Each request's drafter draws with a seed of its own (drafts independent across the samples).
    options.make_drafter = [draft_sampling](const RequestParams& request) {
      SamplingParams seeded = draft_sampling;
      seeded.seed = 1000003 * request.sampling.seed + 99;
      return std::make_unique<OracleDrafter>(*copy_, seeded, false);
    };
    const int64_t samples = 2000;
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(samples), prompt);
    std::vector<RequestParams> params(static_cast<size_t>(samples));
    for (int64_t seed = 0; seed < samples; ++seed) {
      params[size_t(seed)].sampling = sampling;
      params[size_t(seed)].sampling.seed = uint64_t(seed);
      params[size_t(seed)].max_tokens = 4;  // the first verify drafts 2 tokens; the 4th is not counted
      params[size_t(seed)].num_draft = 2;
    }
    EngineStats stats;
    const auto outcomes = run_all(*model_, options, prompts, params, &stats);
    std::map<std::vector<int32_t>, int64_t> observed;
    for (const Outcome& outcome : outcomes) {
      ASSERT_EQ(outcome.ids.size(), 4u);
      ++observed[{outcome.ids.begin(), outcome.ids.begin() + 3}];
    }
    testing::expect_chi_square_passes(observed, expected, samples, stats.speculative.accepted,
                                      stats.speculative.drafted, std::string("engine, ") + (dense ? "dense q" : "point-mass q"));
    check_spec_stats(stats.speculative, false);
    // Seed-determinism: a few requests again, alone.
    for (size_t i : {size_t(0), size_t(7), size_t(1234)})
      EXPECT_EQ(run_all(*model_, options, {prompts[i]}, {params[i]})[0].ids, outcomes[i].ids) << i;
  }
}

// /metrics after speculative requests: the counters, the accepted-per-step histogram and the
// acceptance by position, consistent with each other and with the generated tokens; none of them
// without speculation.
TEST_F(EngineSpecTest, MetricsRenderTheSpeculativeStatistics) {
  std::mt19937 rng(61);
  const int kRequests = 6;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params(kRequests);
  int64_t expected_generated = 0;
  for (int i = 0; i < kRequests; ++i) {
    prompts.push_back(random_prompt(rng, 6 + i, model_->info().vocab_size));
    params[i].max_tokens = 10 + 3 * i;
    params[i].num_draft = 1 + i % 4;
    expected_generated += params[i].max_tokens;
  }
  EngineStats stats;
  run_all(*model_, spec_options(4, true), prompts, params, &stats);
  server::ServerMetrics metrics;
  const std::string text = metrics.render(stats, 0);
  std::map<std::string, double> values;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    values[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  for (const char* name : {"vt_spec_decode_steps_total", "vt_spec_draft_tokens_total", "vt_spec_accepted_tokens_total",
                           "vt_spec_emitted_tokens_total", "vt_spec_accepted_tokens_per_step_mean",
                           "vt_spec_tokens_per_step_mean", "vt_spec_acceptance_rate",
                           "vt_spec_accepted_tokens_per_step_count", "vt_spec_accepted_tokens_per_step_sum"})
    ASSERT_TRUE(values.count(name)) << name << " missing from\n" << text;
  EXPECT_NE(text.find("# TYPE vt_spec_accepted_tokens_per_step histogram"), std::string::npos);
  const double steps = values["vt_spec_decode_steps_total"], accepted = values["vt_spec_accepted_tokens_total"];
  EXPECT_GT(accepted, 0);
  EXPECT_EQ(values["vt_generation_tokens_total"], double(expected_generated));
  // Every token after a request's first comes from a decode step: accepted drafts plus one a step.
  EXPECT_EQ(accepted, values["vt_generation_tokens_total"] - kRequests - steps);
  EXPECT_EQ(values["vt_spec_emitted_tokens_total"], values["vt_generation_tokens_total"] - kRequests);
  EXPECT_EQ(values["vt_spec_accepted_tokens_per_step_count"], steps);
  EXPECT_EQ(values["vt_spec_accepted_tokens_per_step_sum"], accepted);
  EXPECT_NEAR(values["vt_spec_accepted_tokens_per_step_mean"], accepted / steps, 1e-9);
  EXPECT_EQ(values["vt_spec_accepted_tokens_per_step_bucket{le=\"+Inf\"}"], steps);
  EXPECT_EQ(values["vt_spec_accepted_tokens_per_step_bucket{le=\"4\"}"], steps);
  double previous = 0, weighted = 0;
  for (int a = 0; a <= 4; ++a) {
    const double cumulative = values["vt_spec_accepted_tokens_per_step_bucket{le=\"" + std::to_string(a) + "\"}"];
    EXPECT_GE(cumulative, previous);
    weighted += a * (cumulative - previous);
    previous = cumulative;
  }
  EXPECT_EQ(weighted, accepted);
  double drafted = 0, accepted_by_position = 0;
  for (int i = 0; i < 4; ++i) {
    const std::string label = "{position=\"" + std::to_string(i) + "\"}";
    ASSERT_TRUE(values.count("vt_spec_position_drafted_total" + label)) << label;
    const double at = values["vt_spec_position_drafted_total" + label];
    const double ok = values["vt_spec_position_accepted_total" + label];
    drafted += at, accepted_by_position += ok;
    EXPECT_NEAR(values["vt_spec_position_acceptance_rate" + label], at ? ok / at : 0.0, 1e-9);
  }
  EXPECT_GT(values["vt_spec_position_drafted_total{position=\"3\"}"], 0);
  EXPECT_EQ(drafted, values["vt_spec_draft_tokens_total"]);
  EXPECT_EQ(accepted_by_position, accepted);
  EXPECT_FALSE(values.count("vt_spec_position_drafted_total{position=\"4\"}"));

  EngineStats plain;
  run_all(*model_, {}, {prompts[0]}, {RequestParams{}}, &plain);
  EXPECT_EQ(metrics.render(plain, 0).find("vt_spec_"), std::string::npos);
}

// Bad speculative options are refused with a message naming them; nothing is queued.
TEST_F(EngineSpecTest, RefusesBadOptions) {
  auto message_of = [](const std::function<void()>& action) -> std::string {
    try {
      action();
    } catch (const Error& error) {
      return error.what();
    }
    return "";
  };
  const std::vector<int32_t> prompt = {1, 2, 3};
  RequestParams params;
  params.num_draft = 2;
  Collector unused;
  {
    Engine plain(*model_, nullptr, {});
    EXPECT_NE(message_of([&] { plain.submit(prompt, params, unused.callback()); }).find("not enabled"), std::string::npos);
  }
  EngineOptions options;
  options.max_num_draft = 4;
  {
    Engine engine(*model_, nullptr, options);
    params.num_draft = 5;
    EXPECT_NE(message_of([&] { engine.submit(prompt, params, unused.callback()); }).find("num_draft 5 must be in [0, 4]"),
              std::string::npos);
    params.num_draft = -1;
    EXPECT_NE(message_of([&] { engine.submit(prompt, params, unused.callback()); }).find("must be in [0, 4]"),
              std::string::npos);
    EXPECT_EQ(engine.stats().waiting + engine.stats().running, 0);
  }
  options.max_num_draft = -1;
  EXPECT_NE(message_of([&] { Engine engine(*model_, nullptr, options); }).find("max_num_draft must be >= 0"),
            std::string::npos);
  options.max_num_draft = 8;
  options.prefill_chunk = 4;
  options.step_token_budget = 8;  // a verify of 1 + 8 tokens would never fit
  EXPECT_NE(message_of([&] { Engine engine(*model_, nullptr, options); }).find("must hold a verify step"),
            std::string::npos);
  struct NoRollback final : Model {
    ModelInfo model_info{"test-arch", 4, 64};
    const ModelInfo& info() const override { return model_info; }
    std::unique_ptr<SequenceState> new_sequence(int64_t) const override { return nullptr; }
    void forward(std::span<const int32_t>, SequenceState&, const TensorView&, const ForwardOptions&) override {}
    std::string describe() const override { return ""; }
  } no_rollback;
  EngineOptions on = {};
  on.max_num_draft = 2;
  EXPECT_NE(message_of([&] { Engine engine(no_rollback, nullptr, on); }).find("cannot"), std::string::npos);
}

// The batched forward's contract: an all_logits item gets a row per token, equal to what a
// one-token-at-a-time decode gives, and a plain item beside it its last row as before.
TEST_F(EngineSpecTest, ForwardBatchGivesAllRowsForAllLogitsItems) {
  const int64_t vocab = model_->info().vocab_size;
  std::mt19937 rng(71);
  const auto a = random_prompt(rng, 9, vocab), b = random_prompt(rng, 7, vocab);
  auto state_a = model_->new_sequence(32), state_b = model_->new_sequence(32);
  Buffer scratch(DType::kF32, {1, vocab});
  model_->forward(std::span<const int32_t>(a.data(), 5), *state_a, scratch, {});
  model_->forward(std::span<const int32_t>(b.data(), 6), *state_b, scratch, {});
  std::vector<BatchItem> items = {{std::span<const int32_t>(a.data() + 5, 4), state_a.get(), true, true},
                                  {std::span<const int32_t>(b.data() + 6, 1), state_b.get()}};
  ASSERT_EQ(batch_logit_rows(items), 5);
  Buffer logits(DType::kF32, {5, vocab});
  model_->forward_batch(items, logits);
  EXPECT_THROW(model_->forward_batch(items, scratch), Error);  // one row is not enough
  auto decode = [&](const std::vector<int32_t>& tokens, size_t prefix, size_t count) {
    auto state = model_->new_sequence(32);
    Buffer row(DType::kF32, {1, vocab});
    model_->forward(std::span<const int32_t>(tokens.data(), prefix), *state, row, {});
    for (size_t t = prefix; t < prefix + count; ++t)
      model_->forward(std::span<const int32_t>(tokens.data() + t, 1), *state, row, {});
    return std::vector<float>(row.f32(), row.f32() + vocab);
  };
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_EQ(std::vector<float>(logits.f32() + r * vocab, logits.f32() + (r + 1) * vocab), decode(a, 5, size_t(r) + 1))
        << "row " << r;
  EXPECT_EQ(std::vector<float>(logits.f32() + 4 * vocab, logits.f32() + 5 * vocab), decode(b, 6, 1));
}

// ---- The MTP drafter in the engine (`vt serve --speculative mtp`) ----

// The golden dense model with an MTP head fitted to its greedy continuations of the two golden
// prompts (testing::fitted_mtp_tensors: those drafts are accepted), serving requests that draft
// with it as `vt serve --speculative mtp` does: the hidden states kept per target sequence in the
// batched steps, the drafts sampled like the request (seeded from its seed).
class EngineMtpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string name = "qwen3_5_dense";
    fitted_prompts_ = new std::vector<std::vector<int32_t>>{testing::golden_prompt(name, 0), testing::golden_prompt(name, 1)};
    checkpoint_ = new testing::MtpCheckpoint(name, testing::fitted_mtp_tensors(name, *fitted_prompts_, 24, 19));
    Qwen35LoadOptions load;
    load.load_mtp = true;
    model_ = new Qwen35Model(checkpoint_->dir(), load);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete checkpoint_;
    delete fitted_prompts_;
  }
  static EngineOptions mtp_options(int64_t max_num_draft) {
    EngineOptions options;
    options.max_num_draft = max_num_draft;
    options.make_drafter = [](const RequestParams& request) {
      SamplingParams draft_sampling = request.sampling;
      draft_sampling.seed = request.sampling.seed + 1;
      return std::make_unique<MtpDrafter>(*model_, draft_sampling, MtpHiddenSource::kSequence);
    };
    return options;
  }
  static std::vector<std::vector<int32_t>>* fitted_prompts_;
  static testing::MtpCheckpoint* checkpoint_;
  static Qwen35Model* model_;
};
std::vector<std::vector<int32_t>>* EngineMtpTest::fitted_prompts_ = nullptr;
testing::MtpCheckpoint* EngineMtpTest::checkpoint_ = nullptr;
Qwen35Model* EngineMtpTest::model_ = nullptr;

// One request at a time, k = 1..8, prompts fed whole or in chunks of 3 (the kept hidden states
// then span several forwards): the ids are plain greedy decoding's (the engine's and generate()'s);
// on the fitted prompts the drafts are accepted, chained ones too; on a random one they rarely are.
TEST_F(EngineMtpTest, GreedyAloneIdenticalToPlainForEveryK) {
  std::mt19937 rng(61);
  std::vector<std::vector<int32_t>> prompts = *fitted_prompts_;
  prompts.push_back(random_prompt(rng, 9, model_->info().vocab_size));
  for (size_t p = 0; p < prompts.size(); ++p) {
    const bool fitted = p < fitted_prompts_->size();
    RequestParams plain;
    plain.max_tokens = 24;
    const std::vector<int32_t> want = run_all(*model_, {}, {prompts[p]}, {plain})[0].ids;
    EXPECT_EQ(want, testing::plain_greedy(*model_, prompts[p], plain.max_tokens));
    for (int64_t k = 1; k <= 8; ++k) {
      SCOPED_TRACE("prompt " + std::to_string(p) + " k " + std::to_string(k));
      EngineOptions options = mtp_options(8);
      if (k % 2 == 1) options.prefill_chunk = 3;
      RequestParams params = plain;
      params.num_draft = k;
      EngineStats stats;
      const Outcome got = run_all(*model_, options, {prompts[p]}, {params}, &stats)[0];
      EXPECT_EQ(got.last.error, "");
      EXPECT_EQ(got.ids, want);
      const SpeculativeStats& spec = stats.speculative;
      check_spec_stats(spec, false);
      EXPECT_EQ(spec.emitted, plain.max_tokens - 1);
      EXPECT_GT(spec.drafted, 0);
      if (fitted) {
        EXPECT_GE(spec.acceptance_rate(), 0.9) << spec.accepted << " of " << spec.drafted;
        if (k > 1) {
          EXPECT_GT(spec.accepted_at[1], 0) << "no chained draft accepted";
        }
      }
      std::printf("mtp engine prompt %zu k %lld: %lld of %lld drafts accepted in %lld steps\n", p, (long long)k,
                  (long long)spec.accepted, (long long)spec.drafted, (long long)spec.steps);
    }
  }
}

// 16 requests at once on a tight budget: MTP-speculating ones (k = 1..8, some adaptive) beside
// plain ones, greedy and seeded, some with logprobs, on the fitted prompts and random ones. Greedy
// outputs equal plain decoding; every request gives what it gives alone.
TEST_F(EngineMtpTest, SixteenMixedRequestsEqualRunningAlone) {
  const int64_t vocab = model_->info().vocab_size;
  EngineOptions options = mtp_options(8);
  options.prefill_chunk = 8;
  options.step_token_budget = 24;
  options.max_running = 16;
  options.cache_blocks = 256;
  std::mt19937 rng(71);
  const int kRequests = 16;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    prompts.push_back(i % 4 < 2 ? (*fitted_prompts_)[size_t(i % 2)] : random_prompt(rng, 1 + int64_t(rng() % 20), vocab));
    params[i].max_tokens = 5 + int64_t(rng() % 20);
    if (i % 4 != 3) params[i].num_draft = 1 + i % 8;
    params[i].adaptive_draft = i % 5 == 0;
    if (i % 3 == 2) params[i].sampling = {0.9f, 0, 0.95f, uint64_t(700 + i)};
    if (i % 5 == 1) params[i].logprobs = 2;
  }
  EngineStats stats;
  const auto together = run_all(*model_, options, prompts, params, &stats);
  int64_t spec_completion = 0, total_completion = 0, spec_requests = 0;
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(together[i].last.error, "");
    ASSERT_EQ(int64_t(together[i].ids.size()), params[i].max_tokens);
    EXPECT_EQ(together[i].ids, run_all(*model_, options, {prompts[i]}, {params[i]})[0].ids);
    if (params[i].sampling.temperature == 0) {
      RequestParams plain = params[i];
      plain.num_draft = 0;
      EXPECT_EQ(together[i].ids, run_all(*model_, {}, {prompts[i]}, {plain})[0].ids);
    }
    total_completion += int64_t(together[i].ids.size());
    if (params[i].num_draft > 0) spec_completion += int64_t(together[i].ids.size()), ++spec_requests;
  }
  check_spec_stats(stats.speculative, false);
  EXPECT_EQ(stats.generation_tokens_total, total_completion);
  EXPECT_EQ(stats.speculative.emitted, spec_completion - spec_requests);
  EXPECT_EQ(stats.running + stats.waiting + stats.cache.blocks_used + stats.cache.slots_used, 0);
  EXPECT_GT(stats.speculative.accepted, 0);
}

// A pool far too small: MTP-speculating requests are preempted and recomputed (a new target
// sequence re-keeps the hidden states the head needs; the head's own sequence stays with the
// drafter), and each gives what it gives alone; one cancelled mid-way leaves nothing behind.
TEST_F(EngineMtpTest, PreemptionAndCancellation) {
  const EngineOptions options = with_tiny_pool(mtp_options(6));
  std::mt19937 rng(81);
  const int kRequests = 10;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    // The first fitted prompt (7 tokens; the second, 150, would not fit this pool).
    prompts.push_back(i % 3 == 0 ? (*fitted_prompts_)[0]
                                 : random_prompt(rng, 4 + int64_t(rng() % 20), model_->info().vocab_size));
    params[i].max_tokens = 20 + int64_t(rng() % 5);
    params[i].num_draft = i % 4 == 3 ? 0 : 2 + i % 5;
    if (i % 3 == 2) params[i].sampling = {1.0f, 0, 0.95f, uint64_t(900 + i)};
  }
  EngineStats stats;
  const auto together = run_all(*model_, options, prompts, params, &stats);
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_EQ(stats.requests_finished, kRequests);
  EXPECT_EQ(stats.running + stats.waiting + stats.cache.blocks_used + stats.cache.slots_used, 0);
  check_spec_stats(stats.speculative, false);
  EXPECT_GT(stats.speculative.accepted, 0);
  expect_each_as_alone(*model_, options, prompts, params, together, false);

  Engine engine(*model_, nullptr, mtp_options(4));
  RequestParams long_request;
  long_request.max_tokens = 200;
  long_request.num_draft = 4;
  std::promise<void> first_token;
  std::atomic<bool> signalled{false};
  Collector cancelled, other;
  auto inner = cancelled.callback();
  const int64_t id = engine.submit((*fitted_prompts_)[0], long_request, [&](const TokenEvent& event) {
    inner(event);
    if (!signalled.exchange(true)) first_token.set_value();
  });
  RequestParams short_request = long_request;
  short_request.max_tokens = 12;
  engine.submit((*fitted_prompts_)[1], short_request, other.callback());
  first_token.get_future().wait();
  engine.cancel(id);
  cancelled.wait();
  other.wait();
  EXPECT_EQ(cancelled.last.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(other.ids, testing::plain_greedy(*model_, (*fitted_prompts_)[1], 12));
  const EngineStats after = engine.stats();
  EXPECT_EQ(after.running + after.cache.blocks_used + after.cache.slots_used, 0);
  EXPECT_EQ(after.requests_cancelled, 1);
}

// An MtpDrafter that watches the target sequence it reads: how many hidden states it keeps before
// each propose or catch-up (at most one step's tokens), and that none stay unread after.
class KeptHiddenWatcher final : public Drafter {
 public:
  struct Counts {
    std::mutex mutex;
    int64_t calls = 0, catch_ups = 0, most_kept = 0, left_unread = 0;
  };
  KeptHiddenWatcher(Qwen35Model& model, const SamplingParams& sampling, Counts& counts)
      : model_(model), inner_(model, sampling, MtpHiddenSource::kSequence), counts_(counts) {}
  std::string name() const override { return "kept-hidden-watcher"; }
  void start(std::span<const int32_t> prompt, int64_t max_length) override { inner_.start(prompt, max_length); }
  bool reads_target_sequence() const override { return true; }
  void set_target_sequence(SequenceState* target) override {
    target_ = target;
    inner_.set_target_sequence(target);
  }
  int64_t target_hidden_needed_from() const override { return inner_.target_hidden_needed_from(); }
  void propose(std::span<const int32_t> context, int64_t max_tokens, Draft& draft) override {
    watch(false, [&] { inner_.propose(context, max_tokens, draft); });
  }
  // The engine catches up with fewer tokens fed than the context holds: every kept state pairs.
  void catch_up(std::span<const int32_t> context, int64_t fed) override {
    watch(true, [&] { inner_.catch_up(context, fed); });
  }

 private:
  template <typename Call>
  void watch(bool catch_up, const Call& call) {
    const int64_t before = model_.sequence_hidden_positions(*target_).count;
    call();
    const int64_t after = model_.sequence_hidden_positions(*target_).count;
    std::lock_guard<std::mutex> lock(counts_.mutex);
    ++counts_.calls;
    counts_.catch_ups += catch_up;
    counts_.most_kept = std::max(counts_.most_kept, before);
    counts_.left_unread += after > 0;
  }

  Qwen35Model& model_;
  MtpDrafter inner_;
  Counts& counts_;
  SequenceState* target_ = nullptr;
};

// What the CUDA model's per-sequence rows are sized by: the engine's drafters read all a target
// sequence keeps before every step, so it never holds more than one step's tokens (at most the step
// token budget); catching up while a long prompt is fed in chunks (the 150-token fitted prompt,
// 8-token chunks, one a step or three: max_prompt_chunks_per_step), and through preemptions
// (re-fed tokens the head has read keep nothing). Outputs stay plain greedy's.
TEST_F(EngineMtpTest, KeptHiddenStatesStayWithinAStep) {
  const int64_t vocab = model_->info().vocab_size;
  std::mt19937 rng(91);
  // Three loads: the long prompt beside shorter ones in a roomy pool (a chunk a step, then the
  // three the budget holds), and the tiny pool, where requests are preempted mid-way and re-fed.
  enum Load { kLongPrompt, kLongPromptChunks, kTinyPool };
  for (Load load : {kLongPrompt, kTinyPool, kLongPromptChunks}) {
    const bool tiny = load == kTinyPool;
    SCOPED_TRACE(tiny ? "tiny pool" : load == kLongPrompt ? "long prompt" : "long prompt, three chunks a step");
    KeptHiddenWatcher::Counts counts;
    EngineOptions options = with_tiny_pool(mtp_options(6));
    if (!tiny) options.cache_blocks = 256;
    if (load == kLongPromptChunks) options.max_prompt_chunks_per_step = 3;
    options.make_drafter = [&counts](const RequestParams& request) {
      SamplingParams draft_sampling = request.sampling;
      draft_sampling.seed = request.sampling.seed + 1;
      return std::make_unique<KeptHiddenWatcher>(*model_, draft_sampling, counts);
    };
    std::vector<std::vector<int32_t>> prompts;
    if (!tiny) prompts.push_back((*fitted_prompts_)[1]);
    while (prompts.size() < 8)
      prompts.push_back(prompts.size() % 3 == 0 ? (*fitted_prompts_)[0] : random_prompt(rng, 4 + int64_t(rng() % 20), vocab));
    std::vector<RequestParams> params(prompts.size());
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].max_tokens = 20 + int64_t(rng() % 5);
      params[i].num_draft = 1 + int64_t(i) % 6;
    }
    EngineStats stats;
    const auto together = run_all(*model_, options, prompts, params, &stats);
    EXPECT_GT(stats.speculative.accepted, 0);
    if (tiny) {
      EXPECT_GT(stats.recomputed_tokens, 0);
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(together[i].last.error, "") << "request " << i;
      EXPECT_EQ(together[i].ids, testing::plain_greedy(*model_, prompts[i], params[i].max_tokens)) << "request " << i;
    }
    if (load == kLongPrompt) {
      EXPECT_GE(counts.catch_ups, 150 / 8);  // the long prompt's chunks, at least
    }
    if (load == kLongPromptChunks) {
      EXPECT_GT(counts.most_kept, options.prefill_chunk);  // steps of several chunks were read
    }
    EXPECT_GT(counts.calls, counts.catch_ups);
    EXPECT_LE(counts.most_kept, options.step_token_budget);
    EXPECT_EQ(counts.left_unread, 0);
    std::printf("%s: %lld preemptions, %lld tokens re-fed; drafter calls %lld (%lld catch-ups), at most %lld hidden "
                "states kept\n", tiny ? "tiny pool" : load == kLongPrompt ? "long prompt" : "long prompt, 3 chunks",
                (long long)stats.preemptions,
                (long long)stats.recomputed_tokens, (long long)counts.calls, (long long)counts.catch_ups,
                (long long)counts.most_kept);
  }
}

// Sampling stays exact with MTP drafts (sampled like the request: q dense): the joint distribution
// of the first three tokens (temperature 1, top-k 3) of 2000 seeded requests run at once with
// k = 2 is the target's (chi-square at the 0.999 quantile).
TEST_F(EngineMtpTest, SampledDistributionIsTheTargets) {
  const auto& prompt = (*fitted_prompts_)[0];
  const auto expected = testing::first_three_token_distribution(*model_, prompt);
  ASSERT_EQ(expected.size(), 27u);
  EngineOptions options = mtp_options(2);
  const int64_t samples = 2000;
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(samples), prompt);
  std::vector<RequestParams> params(static_cast<size_t>(samples));
  for (int64_t seed = 0; seed < samples; ++seed) {
    params[size_t(seed)].sampling = testing::three_token_sampling();
    params[size_t(seed)].sampling.seed = uint64_t(seed);
    params[size_t(seed)].max_tokens = 4;  // the first verify drafts 2 tokens; the 4th is not counted
    params[size_t(seed)].num_draft = 2;
  }
  EngineStats stats;
  const auto outcomes = run_all(*model_, options, prompts, params, &stats);
  std::map<std::vector<int32_t>, int64_t> observed;
  for (const Outcome& outcome : outcomes) {
    ASSERT_EQ(outcome.ids.size(), 4u);
    ++observed[{outcome.ids.begin(), outcome.ids.begin() + 3}];
  }
  int64_t cells = 0;
  const double statistic = testing::chi_square(observed, expected, samples, &cells);
  std::printf("engine, mtp drafts: chi-square %.1f over %lld cells (bound %.1f), drafts accepted %lld of %lld\n",
              statistic, (long long)cells, testing::chi_square_bound(cells), (long long)stats.speculative.accepted,
              (long long)stats.speculative.drafted);
  EXPECT_LT(statistic, testing::chi_square_bound(cells));
  EXPECT_GT(stats.speculative.accepted, 0);
  EXPECT_LT(stats.speculative.accepted, stats.speculative.drafted);
  check_spec_stats(stats.speculative, false);
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
