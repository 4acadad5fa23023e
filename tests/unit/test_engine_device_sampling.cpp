// The engine's device-sampling path on the CPU: the tiny golden model behind a wrapper that
// "samples on its device" with the CUDA kernel's twin (cpu::sample_rows). Greedy outputs equal the
// host path's; a sampled request's tokens are the twin's draws with its seed and token index
// (whatever else runs, through preemption); requests with logprobs, logit_bias, penalties, min_p
// or speculation get their logits rows and the host Sampler, as with device sampling off; the
// option turns it off.
// Requests with a token rule (structured output) get their rows masked on the host, speculating
// or not, next to requests sampled on the device.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>

#include "engine/engine.h"
#include "models/registry.h"
#include "ops/sampling/sampling.h"
#include "speculative/drafter.h"

namespace vt {
namespace {

const std::string kModelDir = std::string(VT_SOURCE_DIR) + "/tests/golden/qwen3_5_dense";

// The wrapped model's steps, with forward_batch_sample done by the twin on the host logits.
class TwinSamplingModel final : public Model {
 public:
  explicit TwinSamplingModel(Model& inner) : inner_(inner) {}
  const ModelInfo& info() const override { return inner_.info(); }
  std::unique_ptr<SequenceState> new_sequence(int64_t capacity) const override {
    return inner_.new_sequence(capacity);
  }
  void forward(std::span<const int32_t> tokens, SequenceState& state, const TensorView& logits,
               const ForwardOptions& options) override {
    inner_.forward(tokens, state, logits, options);
  }
  void forward_batch(std::span<const BatchItem> items, const TensorView& logits) override {
    ++plain_steps;
    inner_.forward_batch(items, logits);
  }
  std::string describe() const override { return inner_.describe(); }
  bool supports_rollback() const override { return inner_.supports_rollback(); }
  void rollback(SequenceState& state, int64_t length) override { inner_.rollback(state, length); }
  void commit(SequenceState& state) override { inner_.commit(state); }

  bool supports_device_sampling() const override { return true; }
  void forward_batch_sample(std::span<const BatchItem> items, std::span<const RowOutput> rows,
                            std::span<int32_t> tokens, const TensorView& logits) override {
    const int64_t vocab = info().vocab_size, count = batch_logit_rows(items);
    ASSERT_EQ(int64_t(rows.size()), count);
    ASSERT_EQ(int64_t(tokens.size()), count);
    Buffer all(DType::kF32, {count, vocab});
    inner_.forward_batch(items, all.view());
    std::vector<SampleRowParams> params;
    for (int64_t row = 0; row < count; ++row) {
      tokens[size_t(row)] = -1;
      if (rows[size_t(row)].kind == RowOutput::Kind::kToken) {
        params.push_back(sample_row_params(rows[size_t(row)].sampling, rows[size_t(row)].counter, row, vocab));
        ++token_rows;
      } else if (rows[size_t(row)].kind == RowOutput::Kind::kLogits) {
        std::memcpy(logits.f32() + row * vocab, all.f32() + row * vocab, size_t(vocab) * sizeof(float));
        ++logit_rows;
      }
    }
    std::vector<int32_t> drawn(params.size());
    cpu::sample_rows(drawn.data(), all.f32(), vocab, params.data(), int64_t(params.size()));
    for (size_t i = 0; i < params.size(); ++i) tokens[size_t(params[i].row)] = drawn[i];
  }

  std::atomic<int64_t> plain_steps{0}, token_rows{0}, logit_rows{0};

 private:
  Model& inner_;
};

struct Collector {
  std::mutex mutex;
  std::condition_variable done_signal;
  std::vector<int32_t> ids;
  bool done = false;
  std::string error;
  TokenCallback callback() {
    return [this](const TokenEvent& event) {
      std::lock_guard<std::mutex> lock(mutex);
      if (event.token_id >= 0) ids.push_back(event.token_id);
      if (event.finished) {
        error = event.error;
        done = true;
        done_signal.notify_all();
      }
    };
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(done_signal.wait_for(lock, std::chrono::seconds(120), [&] { return done; }));
    EXPECT_TRUE(error.empty()) << error;
  }
};

std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t length, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(length));
  for (auto& id : ids) id = int32_t(rng() % vocab);
  return ids;
}

// Runs every request at once on one engine; returns each one's tokens.
std::vector<std::vector<int32_t>> run_all(Model& model, const EngineOptions& options,
                                          const std::vector<std::vector<int32_t>>& prompts,
                                          const std::vector<RequestParams>& params) {
  std::vector<Collector> collectors(prompts.size());
  {
    Engine engine(model, nullptr, options);
    for (size_t i = 0; i < prompts.size(); ++i) engine.submit(prompts[i], params[i], collectors[i].callback());
    for (auto& collector : collectors) collector.wait();
  }
  std::vector<std::vector<int32_t>> outputs;
  for (auto& collector : collectors) outputs.push_back(collector.ids);
  return outputs;
}

class EngineDeviceSampling : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = load_model(kModelDir, {}).release(); }
  static void TearDownTestSuite() { delete model_; }
  static Model* model_;
};
Model* EngineDeviceSampling::model_ = nullptr;

// 24 requests at once on a small budget (prompt chunks, decodes and queueing mixed): greedy ones
// give the host path's tokens; sampled ones (temperature, top-k, top-p) what they give alone; every
// sampled token was drawn on the "device" and no logits went to the host.
TEST_F(EngineDeviceSampling, BatchedOutputsEqualRunningAloneAndGreedyEqualsHost) {
  TwinSamplingModel device(*model_);
  EngineOptions options;
  options.prefill_chunk = 8;
  options.step_token_budget = 24;
  options.max_running = 8;
  options.cache_blocks = 256;
  std::mt19937 rng(31);
  const int kRequests = 24;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params(kRequests);
  const SamplingParams settings[] = {{0.0f, 0, 1.0f, 0}, {1.0f, 0, 1.0f, 1}, {0.8f, 20, 1.0f, 2}, {1.2f, 0, 0.9f, 3},
                                     {0.7f, 40, 0.8f, 4}, {0.9f, 1, 1.0f, 5}};
  int64_t sampled_tokens = 0;
  for (int i = 0; i < kRequests; ++i) {
    prompts.push_back(random_prompt(rng, 1 + int64_t(rng() % 30), model_->info().vocab_size));
    params[i].max_tokens = 1 + int64_t(rng() % 12);
    params[i].sampling = settings[i % 6];
    params[i].sampling.seed += uint64_t(100 * i);
    sampled_tokens += params[i].max_tokens;
  }
  const auto outputs = run_all(device, options, prompts, params);
  EXPECT_EQ(device.token_rows.load(), sampled_tokens);
  EXPECT_EQ(device.logit_rows.load(), 0);
  EXPECT_EQ(device.plain_steps.load(), 0);
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(int64_t(outputs[i].size()), params[i].max_tokens) << "request " << i;
    EXPECT_EQ(outputs[i], run_all(device, options, {prompts[i]}, {params[i]})[0]) << "request " << i;
    if (i % 6 == 0 || i % 6 == 5) {  // greedy, and top-k 1: the host path's tokens
      EXPECT_EQ(outputs[i], run_all(*model_, options, {prompts[i]}, {params[i]})[0]) << "request " << i;
    }
  }
}

// The k-th generated token of a seeded request is the twin's draw with counter k from the logits
// after the prompt and the tokens before it.
TEST_F(EngineDeviceSampling, TokenIndexIsTheCounter) {
  TwinSamplingModel device(*model_);
  const int64_t vocab = model_->info().vocab_size;
  std::mt19937 rng(32);
  const auto prompt = random_prompt(rng, 9, vocab);
  RequestParams params;
  params.max_tokens = 10;
  params.sampling = {1.1f, 30, 0.95f, 4242};
  const auto output = run_all(device, {}, {prompt}, {params})[0];
  ASSERT_EQ(int64_t(output.size()), params.max_tokens);
  auto state = model_->new_sequence(int64_t(prompt.size()) + params.max_tokens);
  Buffer logits(DType::kF32, {1, vocab});
  std::vector<int32_t> feed = prompt;
  for (int64_t k = 0; k < params.max_tokens; ++k) {
    model_->forward(feed, *state, logits.view(), {});
    const SampleRowParams row = sample_row_params(params.sampling, uint64_t(k), 0, vocab);
    int32_t token = -1;
    cpu::sample_rows(&token, logits.f32(), vocab, &row, 1);
    EXPECT_EQ(output[size_t(k)], token) << "token " << k;
    feed = {output[size_t(k)]};
  }
}

// A pool too small for everyone: preempted requests re-feed their tokens and draw the rest with
// the same counters, so sampled outputs equal running alone.
TEST_F(EngineDeviceSampling, PreemptionKeepsDrawsExact) {
  TwinSamplingModel device(*model_);
  EngineOptions options;
  options.prefill_chunk = 8;
  options.step_token_budget = 24;
  options.max_running = 8;
  options.cache_blocks = 12;
  options.block_size = 8;
  std::mt19937 rng(33);
  const int kRequests = 12;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    prompts.push_back(random_prompt(rng, 4 + int64_t(rng() % 20), model_->info().vocab_size));
    params[i].max_tokens = 20 + int64_t(rng() % 25);
    params[i].sampling = {1.0f, 0, 0.95f, uint64_t(500 + i)};
  }
  std::vector<Collector> collectors(kRequests);
  EngineStats stats;
  {
    Engine engine(device, nullptr, options);
    for (int i = 0; i < kRequests; ++i) engine.submit(prompts[i], params[i], collectors[i].callback());
    for (auto& collector : collectors) collector.wait();
    stats = engine.stats();
  }
  EXPECT_GT(stats.preemptions, 0);
  EngineOptions alone = options;
  alone.cache_blocks = 64;
  alone.reservation = EngineOptions::Reservation::kFull;
  for (int i = 0; i < kRequests; ++i)
    EXPECT_EQ(collectors[i].ids, run_all(device, alone, {prompts[i]}, {params[i]})[0]) << "request " << i;
}

// Logprobs, logit_bias, penalties, min_p and speculative decoding need the logits on the host:
// those requests get their rows and sample with the host Sampler, so they give exactly what they give with device
// sampling off, next to requests sampled on the device. A greedy request's min_p (which greedy
// ignores) keeps it on the device.
TEST_F(EngineDeviceSampling, HostRowsForLogprobsBiasAndSpeculation) {
  TwinSamplingModel device(*model_);
  const int64_t vocab = model_->info().vocab_size;
  std::mt19937 rng(34);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params(9);
  for (int i = 0; i < 9; ++i) {
    prompts.push_back(random_prompt(rng, 5 + i, vocab));
    params[i].max_tokens = 12;
    params[i].sampling = {1.0f, 0, 0.9f, uint64_t(70 + i)};
  }
  params[0].logprobs = 2;
  params[1].logit_bias = {{5, 3.0f}, {9, -2.0f}};
  params[2].num_draft = 3;
  params[3].sampling = {};  // greedy, speculating
  params[3].num_draft = 2;
  params[4].penalties = {0.5f, 0.5f, 1.2f};
  params[5].sampling.min_p = 0.05f;
  params[8].sampling = {};  // greedy
  params[8].sampling.min_p = 0.05f;
  EngineOptions options;
  options.max_num_draft = 4;
  const auto on = run_all(device, options, prompts, params);
  EXPECT_EQ(device.plain_steps.load(), 0);
  EXPECT_GT(device.logit_rows.load(), 0);
  EXPECT_EQ(device.token_rows.load(), params[6].max_tokens + params[7].max_tokens + params[8].max_tokens);
  EngineOptions host = options;
  host.device_sampling = false;
  const auto off = run_all(device, host, prompts, params);
  for (int i : {0, 1, 2, 3, 4, 5, 8}) EXPECT_EQ(on[i], off[i]) << "request " << i;
  EXPECT_GT(device.plain_steps.load(), 0);  // device_sampling = false: forward_batch only
  EXPECT_EQ(device.token_rows.load(), params[6].max_tokens + params[7].max_tokens + params[8].max_tokens);
}

// A token rule allowing only ids divisible by 3; it keeps what it took (rollbacks undo).
class EveryThirdToken final : public TokenConstraint {
 public:
  explicit EveryThirdToken(std::shared_ptr<std::vector<int32_t>> taken) : taken_(std::move(taken)) {}
  void mask(float* logits, int64_t vocab_size) override {
    for (int64_t id = 0; id < vocab_size; ++id)
      if (id % 3 != 0) logits[id] = -std::numeric_limits<float>::infinity();
  }
  bool accept(int32_t token) override {
    if (token % 3 != 0) return false;
    taken_->push_back(token);
    return true;
  }
  void rollback(int count) override { taken_->resize(taken_->size() - size_t(count)); }

 private:
  std::shared_ptr<std::vector<int32_t>> taken_;
};

// Proposes the same tokens every step: multiples of 3 (the rule takes them, then they are rolled
// back before verification) with one it refuses in the middle.
class FixedDrafter final : public Drafter {
 public:
  std::string name() const override { return "fixed"; }
  void start(std::span<const int32_t>, int64_t) override {}
  void propose(std::span<const int32_t>, int64_t max_tokens, Draft& draft) override {
    draft.tokens = {3, 6, 7, 9};
    draft.tokens.resize(size_t(std::min<int64_t>(max_tokens, 4)));
    draft.probs.clear();
  }
};

TEST_F(EngineDeviceSampling, TokenRulesMaskHostRowsSpeculatingOrNot) {
  TwinSamplingModel device(*model_);
  std::mt19937 rng(35);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params(6);
  std::vector<std::shared_ptr<std::vector<int32_t>>> taken(6);
  for (int i = 0; i < 6; ++i) {
    prompts.push_back({7, 12, 5, 30, 9, 7, 12, 5});
    params[i].max_tokens = 10;
    params[i].sampling = i % 2 ? SamplingParams{1.0f, 0, 0.9f, uint64_t(80 + i)} : SamplingParams{};
    taken[size_t(i)] = std::make_shared<std::vector<int32_t>>();
    if (i < 4) {
      params[i].make_constraint = [list = taken[size_t(i)]] { return std::make_unique<EveryThirdToken>(list); };
      params[i].num_draft = i < 2 ? 3 : 0;
    }
  }
  EngineOptions options;
  options.max_num_draft = 4;
  options.make_drafter = [](const RequestParams&) -> std::unique_ptr<Drafter> { return std::make_unique<FixedDrafter>(); };
  const auto outputs = run_all(device, options, prompts, params);
  EXPECT_EQ(device.token_rows.load(), params[4].max_tokens + params[5].max_tokens);  // the free ones, on the device
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(int64_t(outputs[i].size()), params[i].max_tokens) << "request " << i;
    if (i >= 4) continue;
    for (int32_t id : outputs[i]) EXPECT_EQ(id % 3, 0) << "request " << i;
    EXPECT_EQ(*taken[size_t(i)], outputs[i]) << "request " << i;  // drafts it took were rolled back
  }
  // Greedy, same prompt: speculating or not, the same tokens.
  EXPECT_EQ(outputs[0], outputs[2]);
}

}  // namespace
}  // namespace vt
