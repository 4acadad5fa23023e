// Sampling on the device at the model and engine level (the sample_rows kernel itself:
// tests/ops/sampling_cuda_test.cpp). On the golden model, CudaRunner::forward_batch_sample's
// greedy rows equal forward_batch's logits' argmax, its sampled rows the twin's draw from those
// logits and its kLogits rows those logits, in one batch with the rows mixed, for prefill and graph
// decode steps; the engine on it with device sampling on and off (speculating requests among plain
// ones).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_test_support.h"
#include "engine/engine.h"
#include "ops/sampling/sampling.h"
#include "runtime/qwen3_5_cuda.h"
#include "trace/intent.h"

namespace vt {
namespace {

const std::string kGolden = std::string(VT_SOURCE_DIR) + "/tests/golden/";

class CudaSampling : public testing::GpuTest {};

// Rows 0..3 of a step take kinds (s + step) % 4 of: greedy token, sampled token, logits, nothing.
RowOutput row_kind(int64_t which, int64_t step) {
  RowOutput output;
  switch ((which + step) % 4) {
    case 0:
      output.kind = RowOutput::Kind::kToken;  // greedy
      break;
    case 1:
      output.kind = RowOutput::Kind::kToken;
      output.sampling = {0.9f, 40, 0.95f, uint64_t(1000 + which)};
      output.counter = uint64_t(step);
      break;
    case 2: output.kind = RowOutput::Kind::kLogits; break;
    default: break;
  }
  return output;
}

// Four sequences (prompts of 7, 3, 12 and 5 tokens) through a prefill step and 6 decode steps
// (CUDA graphs), all fed the same tokens twice: once by forward_batch (host logits), once by
// forward_batch_sample with the rows' kinds mixed. Greedy rows give the logits' argmax, sampled
// rows the twin's draw from them, kLogits rows the logits themselves (bit for bit), other rows -1.
TEST_F(CudaSampling, ModelRowsMatchForwardBatch) {
  for (DType act : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(act == DType::kF32 ? "f32" : "bf16");
    CudaModelOptions options;
    options.activations = act;
    options.max_sequences = 4;
    options.max_context = 64;
    options.max_step_tokens = 64;
    options.max_logit_rows = 4;
    auto model = load_qwen35_cuda(kGolden + "qwen3_5_dense", options);
    ASSERT_TRUE(model->supports_device_sampling());
    const int64_t vocab = model->info().vocab_size;
    const std::vector<std::vector<int32_t>> prompts = {
        {1, 2, 3, 4, 5, 6, 7}, {11, 12, 13}, {21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}, {41, 42, 43, 44, 45}};
    const int kSteps = 7;
    // Run 1: forward_batch; the next tokens are the logits' argmax.
    std::vector<std::vector<float>> step_logits;
    std::vector<std::vector<std::vector<int32_t>>> fed(kSteps);
    {
      std::vector<std::unique_ptr<SequenceState>> states;
      for (int s = 0; s < 4; ++s) states.push_back(model->new_sequence(64));
      std::vector<std::vector<int32_t>> next = prompts;
      for (int step = 0; step < kSteps; ++step) {
        fed[size_t(step)] = next;
        std::vector<BatchItem> items;
        for (int s = 0; s < 4; ++s) items.push_back({next[size_t(s)], states[size_t(s)].get()});
        Buffer logits(DType::kF32, {4, vocab});
        model->forward_batch(items, logits.view());
        step_logits.emplace_back(logits.f32(), logits.f32() + 4 * vocab);
        for (int s = 0; s < 4; ++s) next[size_t(s)] = {argmax(logits.f32() + s * vocab, vocab)};
      }
    }
    // Run 2: the same tokens through forward_batch_sample.
    std::vector<std::unique_ptr<SequenceState>> states;
    for (int s = 0; s < 4; ++s) states.push_back(model->new_sequence(64));
    for (int step = 0; step < kSteps; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      std::vector<BatchItem> items;
      std::vector<RowOutput> rows;
      for (int s = 0; s < 4; ++s) {
        items.push_back({fed[size_t(step)][size_t(s)], states[size_t(s)].get()});
        rows.push_back(row_kind(s, step));
      }
      Buffer logits(DType::kF32, {4, vocab});
      std::fill(logits.f32(), logits.f32() + 4 * vocab, -1.0f);
      std::vector<int32_t> tokens(4, 123);
      trace::begin_intents();
      model->forward_batch_sample(items, rows, tokens, logits.view());
      const auto intents = trace::end_intents();
      EXPECT_EQ(intents.count("sm90_sample_rows"), 1u);
      const std::vector<float>& want = step_logits[size_t(step)];
      for (int s = 0; s < 4; ++s) {
        const float* row = want.data() + s * vocab;
        const RowOutput& output = rows[size_t(s)];
        const bool logits_row = output.kind == RowOutput::Kind::kLogits;
        EXPECT_EQ(std::memcmp(logits.f32() + s * vocab, logits_row ? row : std::vector<float>(vocab, -1.0f).data(),
                              size_t(vocab) * sizeof(float)),
                  0)
            << "row " << s << (logits_row ? ": the step's logits" : ": left as it was");
        if (output.kind != RowOutput::Kind::kToken) {
          EXPECT_EQ(tokens[size_t(s)], -1) << "row " << s;
        } else if (output.sampling.temperature == 0.0f) {
          EXPECT_EQ(tokens[size_t(s)], argmax(row, vocab)) << "row " << s;
        } else {
          const SampleRowParams params = sample_row_params(output.sampling, output.counter, 0, vocab);
          int32_t expected = -1;
          cpu::sample_rows(&expected, row, vocab, &params, 1);
          EXPECT_EQ(tokens[size_t(s)], expected) << "row " << s;
        }
      }
    }
  }
}

// The engine on the CUDA model (bf16, n-gram speculation enabled): plain and speculating requests,
// greedy and seeded, at once. Greedy outputs are the same with device sampling on and off, and so
// are the speculating sampled ones (their rows come back as logits, the host Sampler draws); with
// it on, a second run repeats every output, the plain sampled ones (drawn on the GPU) included.
TEST_F(CudaSampling, EngineOnAndOffAgreeAndSeedsRepeat) {
  const int64_t kDrafts = 3, kRunning = 6;
  CudaModelOptions options;
  options.activations = DType::kBF16;
  options.max_sequences = kRunning;
  options.max_context = 128;
  options.max_step_tokens = 64;
  options.max_logit_rows = kRunning * (1 + kDrafts);  // verify rows
  options.max_rollback_tokens = kDrafts + 1;
  auto model = load_qwen35_cuda(kGolden + "qwen3_5_dense", options);
  ASSERT_TRUE(model->supports_device_sampling());
  std::vector<RequestParams> params(static_cast<size_t>(kRunning));
  for (size_t r = 0; r < params.size(); ++r) {
    params[r].max_tokens = 20;
    if (r % 3 != 0) params[r].sampling = {1.0f, r % 2 ? 0 : 50, r % 3 == 1 ? 0.9f : 1.0f, 7 + r};
    if (r >= 3) params[r].num_draft = kDrafts;  // 3: greedy, 4 and 5: sampled
  }
  const auto run = [&](bool device_sampling) {
    EngineOptions engine_options;
    engine_options.max_running = kRunning;
    engine_options.step_token_budget = 64;
    engine_options.prefill_chunk = 16;
    engine_options.cache_blocks = 64;
    engine_options.max_num_draft = kDrafts;
    engine_options.device_sampling = device_sampling;
    std::mutex mutex;
    std::condition_variable done;
    int finished = 0;
    std::vector<std::vector<int32_t>> outputs(params.size());
    Engine engine(*model, nullptr, engine_options);
    for (size_t r = 0; r < params.size(); ++r) {
      std::vector<int32_t> prompt;  // repeats itself, so n-gram drafts are sometimes right
      for (int i = 0; i < 5 + int(r) * 7; ++i) prompt.push_back(int32_t((r * 31 + size_t(i % 6) * 7) % 200));
      engine.submit(prompt, params[r], [&, r](const TokenEvent& event) {
        std::lock_guard<std::mutex> lock(mutex);
        if (event.token_id >= 0) outputs[r].push_back(event.token_id);
        if (event.finished) {
          EXPECT_TRUE(event.error.empty()) << event.error;
          ++finished;
          done.notify_all();
        }
      });
    }
    std::unique_lock<std::mutex> lock(mutex);
    EXPECT_TRUE(done.wait_for(lock, std::chrono::seconds(120), [&] { return finished == int(params.size()); }));
    return outputs;
  };
  const auto on = run(true), off = run(false);
  for (size_t r = 0; r < params.size(); ++r) {
    EXPECT_EQ(int64_t(on[r].size()), params[r].max_tokens) << "request " << r;
    if (r % 3 == 0 || r >= 3) {  // greedy, or speculating
      EXPECT_EQ(on[r], off[r]) << "request " << r;
    }
  }
  EXPECT_EQ(run(true), on);
}

// Structured output on the GPU model: requests with a token rule (ids divisible by 3) get their
// rows as logits and the mask on the host, greedy, sampled and speculating, while the others of
// the batch sample on the GPU; the rule's tokens are the output (drafts it took rolled back), and
// greedy constrained outputs are the same with device sampling on and off.
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

TEST_F(CudaSampling, EngineTokenRulesMaskTheirRows) {
  const int64_t kDrafts = 3, kRunning = 6;
  CudaModelOptions options;
  options.activations = DType::kBF16;
  options.max_sequences = kRunning;
  options.max_context = 128;
  options.max_step_tokens = 64;
  options.max_logit_rows = kRunning * (1 + kDrafts);
  options.max_rollback_tokens = kDrafts + 1;
  auto model = load_qwen35_cuda(kGolden + "qwen3_5_dense", options);
  const auto run = [&](bool device_sampling, std::vector<std::shared_ptr<std::vector<int32_t>>>& taken) {
    std::vector<RequestParams> params(static_cast<size_t>(kRunning));
    taken.clear();
    for (size_t r = 0; r < params.size(); ++r) {
      taken.push_back(std::make_shared<std::vector<int32_t>>());
      params[r].max_tokens = 16;
      if (r % 2) params[r].sampling = {1.0f, 0, 0.9f, 11 + r};
      if (r < 4) params[r].make_constraint = [list = taken[r]] { return std::make_unique<EveryThirdToken>(list); };
      if (r == 2 || r == 3) params[r].num_draft = kDrafts;
    }
    EngineOptions engine_options;
    engine_options.max_running = kRunning;
    engine_options.step_token_budget = 64;
    engine_options.prefill_chunk = 16;
    engine_options.cache_blocks = 64;
    engine_options.max_num_draft = kDrafts;
    engine_options.device_sampling = device_sampling;
    std::mutex mutex;
    std::condition_variable done;
    int finished = 0;
    std::vector<std::vector<int32_t>> outputs(params.size());
    Engine engine(*model, nullptr, engine_options);
    for (size_t r = 0; r < params.size(); ++r) {
      std::vector<int32_t> prompt;  // repeats itself: n-gram drafts
      for (int i = 0; i < 12; ++i) prompt.push_back(int32_t((r * 31 + size_t(i % 4) * 3) % 200));
      engine.submit(prompt, params[r], [&, r](const TokenEvent& event) {
        std::lock_guard<std::mutex> lock(mutex);
        if (event.token_id >= 0) outputs[r].push_back(event.token_id);
        if (event.finished) {
          EXPECT_TRUE(event.error.empty()) << event.error;
          ++finished;
          done.notify_all();
        }
      });
    }
    std::unique_lock<std::mutex> lock(mutex);
    EXPECT_TRUE(done.wait_for(lock, std::chrono::seconds(120), [&] { return finished == int(params.size()); }));
    return outputs;
  };
  std::vector<std::shared_ptr<std::vector<int32_t>>> taken_on, taken_off;
  const auto on = run(true, taken_on), off = run(false, taken_off);
  for (size_t r = 0; r < on.size(); ++r) {
    EXPECT_EQ(on[r].size(), 16u) << "request " << r;
    if (r >= 4) continue;
    for (int32_t id : on[r]) EXPECT_EQ(id % 3, 0) << "request " << r;
    EXPECT_EQ(*taken_on[r], on[r]) << "request " << r;
    if (r % 2 == 0) EXPECT_EQ(on[r], off[r]) << "request " << r;  // greedy
  }
}

}  // namespace
}  // namespace vt
