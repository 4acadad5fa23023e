// A model forward that throws inside the engine loop (FaultyModel, a stand-in for a CUDA error),
// on the tiny golden Qwen3.5 model: the step's requests and every running one end with the error,
// queued ones end retryable, the engine takes no new requests and reports itself failed, and its
// cache is empty afterwards; a FaultyModel that never fails changes nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <span>

#include "core/error.h"
#include "engine/engine.h"
#include "model/faulty_model.h"
#include "model/generate.h"
#include "models/registry.h"
#include "server/metrics.h"

namespace vt {
namespace {

const std::string kModelDir = std::string(VT_SOURCE_DIR) + "/tests/golden/qwen3_5_dense";

struct Outcome {
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

std::vector<int32_t> prompt_of(uint32_t seed, int64_t length, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(length));
  for (auto& id : ids) id = int32_t(rng() % vocab);
  return ids;
}

class EngineFaultTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = load_model(kModelDir, {}).release(); }
  static void TearDownTestSuite() { delete model_; }
  static Model* model_;
};
Model* EngineFaultTest::model_ = nullptr;

// A FaultyModel whose forwards wait until release(): requests submitted before it are all queued
// when the engine's first step ends, however the engine's thread is scheduled.
class HeldFaultyModel : public FaultyModel {
 public:
  using FaultyModel::FaultyModel;
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
    released_signal_.notify_all();
  }
  void forward_batch(std::span<const BatchItem> items, const TensorView& logits) override {
    hold();
    FaultyModel::forward_batch(items, logits);
  }
  void forward_batch_sample(std::span<const BatchItem> items, std::span<const RowOutput> rows,
                            std::span<int32_t> tokens, const TensorView& logits) override {
    hold();
    FaultyModel::forward_batch_sample(items, rows, tokens, logits);
  }

 private:
  void hold() {
    std::unique_lock<std::mutex> lock(mutex_);
    released_signal_.wait(lock, [&] { return released_; });
  }
  std::mutex mutex_;
  std::condition_variable released_signal_;
  bool released_ = false;
};

TEST_F(EngineFaultTest, NoFaultChangesNothing) {
  const auto prompt = prompt_of(1, 9, model_->info().vocab_size);
  GenerateOptions generate_options;
  generate_options.max_new_tokens = 10;
  const auto expected = generate(*model_, prompt, generate_options).output_ids;
  FaultyModel faulty(*model_, 0);
  Engine engine(faulty, nullptr, {});
  Outcome outcome;
  RequestParams params;
  params.max_tokens = 10;
  engine.submit(prompt, params, outcome.callback());
  outcome.wait();
  EXPECT_EQ(outcome.ids, expected);
  EXPECT_EQ(outcome.last.error, "");
  EXPECT_FALSE(engine.failed());
  EXPECT_GE(faulty.forwards(), 10);
}

// The second request's sequence cannot be made (FaultyModel fails the 2nd new sequence, as a
// device out of memory for it would): that request alone fails, with the reason, and the engine
// goes on: the others give the tokens they give alone, new requests are taken, the cache empties.
TEST_F(EngineFaultTest, ARequestThatCannotStartFailsAlone) {
  const int64_t vocab = model_->info().vocab_size;
  GenerateOptions generate_options;
  generate_options.max_new_tokens = 6;
  FaultyModel faulty(*model_, 0, 2);
  EngineOptions options;
  options.max_running = 1;  // admitted one after the other: the 2nd admission is the 2nd request's
  Engine engine(faulty, nullptr, options);
  Outcome outcomes[3];
  RequestParams params;
  params.max_tokens = 6;
  for (int i = 0; i < 3; ++i) engine.submit(prompt_of(40 + uint32_t(i), 7, vocab), params, outcomes[i].callback());
  for (Outcome& outcome : outcomes) outcome.wait();
  EXPECT_NE(outcomes[1].last.error.find("the request could not start: injected fault: new sequence 2"),
            std::string::npos)
      << outcomes[1].last.error;
  EXPECT_TRUE(outcomes[1].ids.empty());
  for (int i : {0, 2}) {
    EXPECT_EQ(outcomes[i].last.error, "") << "request " << i;
    EXPECT_EQ(outcomes[i].ids, generate(*model_, prompt_of(40 + uint32_t(i), 7, vocab), generate_options).output_ids)
        << "request " << i;
  }
  EXPECT_FALSE(engine.failed());
  Outcome later;
  engine.submit(prompt_of(43, 5, vocab), params, later.callback());
  later.wait();
  EXPECT_EQ(later.last.error, "");
  EXPECT_EQ(int64_t(later.ids.size()), params.max_tokens);
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.waiting, 0);
  EXPECT_EQ(stats.cache.blocks_used, 0);
  EXPECT_EQ(stats.cache.slots_used, 0);
}

// Two run (max_running 2) while two wait; the 6th batched forward throws. The running ones end with
// the error and are not retryable; the waiting ones never ran and are; nothing is admitted again.
TEST_F(EngineFaultTest, AFailedForwardFailsTheEngine) {
  HeldFaultyModel faulty(*model_, 6);  // all four submitted before a forward runs
  EngineOptions options;
  options.max_running = 2;
  options.prefill_chunk = 8;
  options.step_token_budget = 16;
  Engine engine(faulty, nullptr, options);
  const int64_t vocab = model_->info().vocab_size;
  Outcome outcomes[4];
  RequestParams params;
  params.max_tokens = 40;
  for (int i = 0; i < 4; ++i) engine.submit(prompt_of(10 + uint32_t(i), 12, vocab), params, outcomes[i].callback());
  faulty.release();
  for (Outcome& outcome : outcomes) outcome.wait();

  for (int i = 0; i < 2; ++i) {
    EXPECT_NE(outcomes[i].last.error.find("injected fault"), std::string::npos) << outcomes[i].last.error;
    EXPECT_FALSE(outcomes[i].last.retryable) << "request " << i;
    EXPECT_LT(int64_t(outcomes[i].ids.size()), params.max_tokens) << "request " << i;
  }
  for (int i = 2; i < 4; ++i) {
    EXPECT_NE(outcomes[i].last.error.find("injected fault"), std::string::npos) << outcomes[i].last.error;
    EXPECT_TRUE(outcomes[i].last.retryable) << "request " << i;
    EXPECT_TRUE(outcomes[i].ids.empty()) << "request " << i;
  }
  EXPECT_TRUE(engine.failed());
  EXPECT_NE(engine.failure().find("the model's forward failed: injected fault: batched forward 6"), std::string::npos)
      << engine.failure();
  // Nothing runs on the model again, and the cache is empty.
  const int64_t forwards = faulty.forwards();
  EXPECT_EQ(forwards, 6);
  const EngineStats stats = engine.stats();
  EXPECT_TRUE(stats.failed);
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.waiting, 0);
  EXPECT_EQ(stats.cache.blocks_used, 0);
  EXPECT_EQ(stats.cache.slots_used, 0);
  Outcome refused;
  try {
    engine.submit(prompt_of(20, 5, vocab), params, refused.callback());
    ADD_FAILURE() << "a failed engine took a request";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("the engine failed"), std::string::npos) << error.what();
  }
  EXPECT_EQ(faulty.forwards(), forwards);
  // /metrics says so.
  const std::string metrics = server::ServerMetrics("m").render(stats, 0);
  EXPECT_NE(metrics.find("\nvt_engine_failed 1\n"), std::string::npos);
}

// The fault in a step that also feeds a prompt chunk: every sequence in the step fails with it,
// whichever round of the step it was in. The first forward is held until both requests are queued
// (else the engine could decode the short one alone into the fault before the long one came, and
// the second submit would meet a failed engine: a flake seen once under load).
TEST_F(EngineFaultTest, FaultAmidPrefill) {
  HeldFaultyModel faulty(*model_, 2);
  EngineOptions options;
  options.prefill_chunk = 4;
  options.step_token_budget = 8;
  Engine engine(faulty, nullptr, options);
  const int64_t vocab = model_->info().vocab_size;
  Outcome first, second;
  RequestParams params;
  params.max_tokens = 4;
  engine.submit(prompt_of(30, 3, vocab), params, first.callback());
  engine.submit(prompt_of(31, 30, vocab), params, second.callback());
  faulty.release();
  first.wait();
  second.wait();
  EXPECT_FALSE(first.last.error.empty());
  EXPECT_FALSE(second.last.error.empty());
  EXPECT_TRUE(engine.failed());
  EXPECT_EQ(faulty.forwards(), 2);
  EXPECT_EQ(engine.stats().cache.blocks_used, 0);
}

// A request that cannot start takes none of the step's budget: beside it, a 500-token prompt is fed
// in four steps of up to four chunks (the failed one's phantom chunk left one of them 96 tokens, and a
// fifth forward).
TEST_F(EngineFaultTest, ARequestThatCannotStartTakesNoStepBudget) {
  HeldFaultyModel faulty(*model_, 0, 2);
  EngineOptions options;
  options.prefill_chunk = 32;
  options.step_token_budget = 4 * 32 + 4;
  options.max_prompt_chunks_per_step = 4;
  Engine engine(faulty, nullptr, options);
  const int64_t vocab = model_->info().vocab_size;
  Outcome long_prompt, failed;
  RequestParams params;
  params.max_tokens = 1;
  engine.submit(prompt_of(50, 500, vocab), params, long_prompt.callback());
  engine.submit(prompt_of(51, 40, vocab), params, failed.callback());
  faulty.release();
  long_prompt.wait();
  failed.wait();
  EXPECT_EQ(long_prompt.last.error, "");
  EXPECT_NE(failed.last.error.find("the request could not start"), std::string::npos) << failed.last.error;
  EXPECT_EQ(faulty.forwards(), 4);
}

}  // namespace
}  // namespace vt
