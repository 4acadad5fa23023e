// Sampling on the device: cuda::sample_rows against the host Sampler and its CPU twin, and
// Qwen35CudaModel::forward_batch_sample against forward_batch. The kernel's greedy and top-k 1 rows
// are the host argmax (vocab 1000, 4099 and 248,320; f32 and bf16 logits); its draws never leave
// Sampler::distribution's support and pass a chi-square test against it (temperature, top-k,
// top-p, both; boundaries inside ties); they are cpu::sample_rows's tokens (up to f32 log/exp
// rounding: kDeviceSamplingTwinMismatch); the same seed and counter give the same token; the launch
// records its intent and CUPTI sees it run. On the golden model, forward_batch_sample's greedy rows
// equal forward_batch's logits' argmax, its sampled rows the twin's draw from those logits and its
// kLogits rows those logits, in one batch with the rows mixed, for prefill and graph decode steps;
// the engine on it with device sampling on and off (speculating requests among plain ones).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../numerics.h"
#include "../sampling_test_support.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "cuda_test_support.h"
#include "engine/engine.h"
#include "ops/sampling/sampling.h"
#include "profile/kernel_gate.h"
#include "profile/kernel_recorder.h"
#include "runtime/qwen3_5_cuda.h"
#include "trace/intent.h"

namespace vt {
namespace {

using testing::LogitShape;
using testing::logit_shape_name;
using testing::SampleRowsFn;

const std::string kGolden = std::string(VT_SOURCE_DIR) + "/tests/golden/";
constexpr int64_t kQwenVocab = 248320;

class CudaSampling : public testing::GpuTest {};

// Rounds every value to bf16 (what the model's bf16 logits hold), so host and device see the same.
std::vector<float> round_to_bf16(std::vector<float> values) {
  for (float& value : values) value = bf16_to_f32(f32_to_bf16(value));
  return values;
}

// The kernel on logits uploaded as `act` (bf16 values must already be bf16-exact).
SampleRowsFn kernel(DType act) {
  return [act](const std::vector<float>& logits, int64_t vocab, const std::vector<SampleRowParams>& params) {
    cuda::DeviceBuffer device_logits(act, {int64_t(logits.size())});
    if (act == DType::kF32) {
      cuda::copy_to_device(device_logits.data(), logits.data(), logits.size() * sizeof(float));
    } else {
      std::vector<uint16_t> bits(logits.size());
      for (size_t i = 0; i < logits.size(); ++i) bits[i] = f32_to_bf16(logits[i]);
      cuda::copy_to_device(device_logits.data(), bits.data(), bits.size() * sizeof(uint16_t));
    }
    const int64_t count = int64_t(params.size());
    cuda::DeviceBuffer device_params(DType::kU8, {count * int64_t(sizeof(SampleRowParams))});
    cuda::copy_to_device(device_params.data(), params.data(), params.size() * sizeof(SampleRowParams));
    cuda::DeviceBuffer device_tokens(DType::kI32, {count});
    cuda::sample_rows(device_tokens.as<int32_t>(), device_logits.data(), vocab, act,
                      reinterpret_cast<const SampleRowParams*>(device_params.data()), count, nullptr);
    std::vector<int32_t> tokens(params.size());
    cuda::copy_to_host(tokens.data(), device_tokens.data(), tokens.size() * sizeof(int32_t));
    return tokens;
  };
}

std::vector<int32_t> twin(const std::vector<float>& logits, int64_t vocab, const std::vector<SampleRowParams>& params) {
  std::vector<int32_t> tokens(params.size());
  cpu::sample_rows(tokens.data(), logits.data(), vocab, params.data(), int64_t(params.size()));
  return tokens;
}

TEST_F(CudaSampling, GreedyRowsAreTheArgmax) {
  for (int64_t vocab : {int64_t(1000), int64_t(4099), kQwenVocab}) {
    for (LogitShape shape : {LogitShape::kNormal, LogitShape::kLevels}) {
      const auto logits = testing::random_logits(vocab == kQwenVocab ? 3 : 8, vocab, uint64_t(vocab) + 1, shape);
      const std::string label = std::to_string(vocab) + " " + logit_shape_name(shape);
      testing::expect_greedy_rows_are_argmax(kernel(DType::kF32), logits, vocab, label + " f32");
      testing::expect_greedy_rows_are_argmax(kernel(DType::kBF16), round_to_bf16(logits), vocab, label + " bf16");
    }
  }
  // Ties to the lowest id, the maximum at either end of the row.
  std::vector<float> tied(3 * 1000, 0.0f);
  tied[17] = tied[900] = 3.0f;
  tied[1000 + 999] = 1.0f;
  tied[2000] = 5.0f;
  testing::expect_greedy_rows_are_argmax(kernel(DType::kF32), tied, 1000, "tied");
}

TEST_F(CudaSampling, FollowsTheSamplerDistribution) {
  const int64_t draws = 20000;
  for (int64_t vocab : {1000, 4099}) {
    for (LogitShape shape : {LogitShape::kNormal, LogitShape::kCoarse, LogitShape::kLevels}) {
      const auto logits = testing::random_logits(2, vocab, uint64_t(vocab) + 10 * int(shape), shape);
      for (const auto& [name, sampling] : testing::sampled_cases()) {
        if (shape != LogitShape::kNormal && sampling.top_k == 0 && sampling.top_p == 1.0f) continue;
        const std::string label = std::string("kernel ") + name + ", vocab " + std::to_string(vocab) + ", " +
                                  logit_shape_name(shape);
        testing::expect_draws_follow_sampler(kernel(DType::kF32), logits, vocab, 1, sampling, draws, label + " f32");
        if (vocab == 4099 && shape == LogitShape::kNormal)
          testing::expect_draws_follow_sampler(kernel(DType::kBF16), round_to_bf16(logits), vocab, 0, sampling, draws,
                                               label + " bf16");
      }
    }
  }
}

// The real vocabulary with bf16 logits as the model emits them (N(0, 2^2): the mass is spread over
// thousands of ids, so top-p keeps many and the tail matters).
TEST_F(CudaSampling, FollowsTheSamplerDistributionAtTheRealVocabulary) {
  const auto logits = round_to_bf16(testing::random_logits(2, kQwenVocab, 77, LogitShape::kNormal));
  for (const SamplingParams& sampling : {SamplingParams{1.0f, 0, 1.0f, 1}, SamplingParams{0.7f, 50, 1.0f, 2},
                                         SamplingParams{1.0f, 0, 0.9f, 3}, SamplingParams{0.6f, 40, 0.8f, 4},
                                         SamplingParams{0.25f, 0, 0.5f, 5}}) {
    const std::string label = "vocab 248320 bf16 t " + std::to_string(sampling.temperature) + " k " +
                              std::to_string(sampling.top_k) + " p " + std::to_string(sampling.top_p);
    testing::expect_draws_follow_sampler(kernel(DType::kBF16), logits, kQwenVocab, 1, sampling, 20000, label);
  }
}

// Token for token the CPU twin's, but where f32 log / exp round differently on the two sides (a
// Gumbel score or a nucleus boundary within an ulp): kDeviceSamplingTwinMismatch of the draws.
TEST_F(CudaSampling, EqualsTheCpuTwin) {
  for (int64_t vocab : {int64_t(1000), int64_t(4099), kQwenVocab}) {
    for (LogitShape shape : {LogitShape::kNormal, LogitShape::kCoarse, LogitShape::kLevels}) {
      if (vocab == kQwenVocab && shape != LogitShape::kNormal) continue;
      const int64_t rows = vocab == kQwenVocab ? 2 : 4, counters = vocab == kQwenVocab ? 8 : 64;
      const auto logits = round_to_bf16(testing::random_logits(rows, vocab, uint64_t(vocab) + 3, shape));
      std::vector<SampleRowParams> params;
      for (int64_t row = 0; row < rows; ++row)
        for (const auto& [name, sampling] : testing::sampled_cases())
          for (int64_t counter = 0; counter < counters; ++counter)
            params.push_back(sample_row_params(sampling, uint64_t(counter), row, vocab));
      const auto expected = twin(logits, vocab, params);
      for (DType act : {DType::kF32, DType::kBF16}) {
        const auto got = kernel(act)(logits, vocab, params);
        int64_t differ = 0;
        for (size_t i = 0; i < got.size(); ++i) differ += got[i] != expected[i];
        std::printf("vocab %lld %s %s: %lld of %zu draws differ from the twin\n", (long long)vocab,
                    logit_shape_name(shape), act == DType::kF32 ? "f32" : "bf16", (long long)differ, got.size());
        EXPECT_LE(double(differ), numerics::kDeviceSamplingTwinMismatch * double(got.size()))
            << vocab << " " << logit_shape_name(shape);
      }
    }
  }
}

TEST_F(CudaSampling, SplitsTiedBoundariesById) {
  std::vector<float> logits(4096, -4.0f);
  for (int i = 0; i < 5; ++i) logits[size_t(100 * i)] = 3.0f;  // ids 0, 100, 200, 300, 400
  const auto tokens = testing::expect_draws_follow_sampler(kernel(DType::kF32), logits, 4096, 0, {1.0f, 3, 1.0f, 5},
                                                           5000, "top-k tie");
  for (int32_t token : tokens) EXPECT_TRUE(token == 0 || token == 100 || token == 200) << token;
  std::vector<float> four(4096, -30.0f);
  for (int i = 0; i < 4; ++i) four[size_t(1000 + 1000 * i)] = 1.0f;  // ids 1000, 2000, 3000, 4000
  const auto nucleus = testing::expect_draws_follow_sampler(kernel(DType::kF32), four, 4096, 0, {1.0f, 0, 0.4f, 6},
                                                            5000, "top-p tie");
  for (int32_t token : nucleus) EXPECT_TRUE(token == 1000 || token == 2000) << token;
  // Top-k 4 of ten tied leaders, top-p needing all four: the nucleus ends at top-k's boundary
  // inside the tie (ids 0, 300, 600, 900), not at the whole tie.
  std::vector<float> ten(4096, -30.0f);
  for (int i = 0; i < 10; ++i) ten[size_t(300 * i)] = 2.0f;
  const auto both = testing::expect_draws_follow_sampler(kernel(DType::kF32), ten, 4096, 0, {1.0f, 4, 0.99f, 7}, 5000,
                                                         "top-k+p tie");
  for (int32_t token : both) EXPECT_TRUE(token == 0 || token == 300 || token == 600 || token == 900) << token;
}

// The same seed and counter give the same token, whatever the row's place in the launch and
// whatever else the launch samples.
TEST_F(CudaSampling, DeterministicBySeedAndCounter) {
  const auto logits = testing::random_logits(3, 4099, 9, LogitShape::kNormal);
  testing::expect_same_seed_same_tokens(kernel(DType::kF32), logits, 4099, "kernel");
  std::vector<SampleRowParams> alone = {sample_row_params({0.9f, 30, 0.9f, 123}, 17, 2, 4099)};
  std::vector<SampleRowParams> crowd;
  for (int i = 0; i < 50; ++i)
    crowd.push_back(sample_row_params({1.0f, 0, 0.7f, uint64_t(i)}, uint64_t(i), i % 3, 4099));
  crowd.insert(crowd.begin() + 23, alone[0]);
  EXPECT_EQ(kernel(DType::kF32)(logits, 4099, crowd)[23], kernel(DType::kF32)(logits, 4099, alone)[0]);
}

// The launcher states its kernel; CUPTI sees it run once per launch (the kernel-ran gate passes).
TEST_F(CudaSampling, IntentMatchesWhatCuptiRecorded) {
  const auto logits = testing::random_logits(2, 1000, 4, LogitShape::kNormal);
  const std::vector<SampleRowParams> params = {sample_row_params({1.0f, 20, 0.9f, 1}, 0, 0, 1000),
                                               sample_row_params({0.0f, 0, 1.0f, 1}, 0, 1, 1000)};
  kernel(DType::kF32)(logits, 1000, params);  // module load outside the window
  profile::KernelRecorder recorder;
  recorder.start();
  trace::begin_intents();
  kernel(DType::kF32)(logits, 1000, params);
  const auto intents = trace::end_intent_records();
  cuda::synchronize();
  const auto records = recorder.stop();
  ASSERT_EQ(intents.size(), 1u);
  EXPECT_EQ(intents[0].kernel, "sm90_sample_rows");
  EXPECT_EQ(intents[0].group, trace::OpGroup::kSampling);
  EXPECT_NO_THROW(profile::check_kernels_ran(intents, records, 1));
}

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
