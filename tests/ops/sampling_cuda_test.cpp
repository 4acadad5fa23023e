// The sampling kernels (ops/sampling/): argmax, and sample_rows against the host Sampler and its
// CPU twin. Greedy and top-k 1 rows are the host argmax (vocab 1000, 4099 and 248,320; f32 and
// bf16 logits); draws never leave Sampler::distribution's support and pass a chi-square test
// against it (temperature, top-k, top-p, both; boundaries inside ties); they are cpu::sample_rows's
// tokens (up to f32 log/exp rounding: kDeviceSamplingTwinMismatch); the same seed and counter give
// the same token; the launch records its intent and CUPTI sees it run.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../numerics.h"
#include "../sampling_test_support.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "op_cuda_test_support.h"
#include "ops/sampling/sampler.h"
#include "ops/sampling/sampling.h"
#include "profile/kernel_gate.h"
#include "profile/kernel_recorder.h"
#include "trace/intent.h"

namespace vt {
namespace {

using testing::LogitShape;
using testing::logit_shape_name;
using testing::SampleRowsFn;
using testing::upload;

class SamplingCuda : public testing::GpuTest {};

TEST_F(SamplingCuda, ArgmaxTakesTheFirstMaximum) {
  std::vector<float> logits(2 * 1000, 0.0f);
  logits[17] = 3.0f, logits[900] = 3.0f;           // row 0: tie -> 17
  logits[1000 + 999] = 1.0f;                        // row 1: last element
  auto d_logits = upload(logits, DType::kF32);
  cuda::DeviceBuffer out(DType::kI32, {2});
  cuda::argmax_rows(out.as<int32_t>(), d_logits.data(), 2, 1000, DType::kF32, nullptr);
  std::vector<int32_t> ids(2);
  cuda::copy_to_host(ids.data(), out.data(), 8);
  EXPECT_EQ(ids, (std::vector<int32_t>{17, 999}));
}

constexpr int64_t kQwenVocab = 248320;


// Rounds every value to bf16 (what the model's bf16 logits hold), so host and device see the same.
std::vector<float> round_to_bf16(std::vector<float> values) {
  for (float& value : values) value = bf16_to_f32(f32_to_bf16(value));
  return values;
}

// The host argmax (the first maximum) on rows whose maxima sit in each CTA's share of the row and
// tie across them: vocab sizes that fill the 16-byte groups or not (then every logit alone), rows
// that start unaligned, f32 and bf16; NaN never wins, an all -inf row gives 0; reruns agree.
TEST_F(SamplingCuda, ArgmaxRowsMatchTheHostOnAwkwardRows) {
  for (const DType act : {DType::kF32, DType::kBF16}) {
    for (const int64_t vocab : {int64_t(1), int64_t(7), int64_t(8), int64_t(1001), int64_t(4099), int64_t(32768 + 8),
                                kQwenVocab}) {
      for (const int64_t offset : {int64_t(0), int64_t(1)}) {  // 1: the rows start 4 or 2 bytes in
        const int64_t rows = 5;
        std::vector<float> logits = round_to_bf16(testing::random_vector(size_t(rows * vocab), uint64_t(vocab) + 7));
        std::mt19937_64 rng(uint64_t(vocab) * 31 + uint64_t(offset));
        for (int64_t r = 0; r < 3; ++r) {  // rows 0-2: the maximum planted 1, 2 and 3 times
          for (int64_t j = 0; j <= r; ++j) logits[size_t(r * vocab + int64_t(rng() % uint64_t(vocab)))] = 9.0f;
        }
        for (int64_t i = 0; i < vocab; ++i) logits[size_t(3 * vocab + i)] = -INFINITY;  // row 3
        // Row 4: NaN in front of and beside the maximum (alone at vocab 1: then 0).
        const int64_t top = vocab > 1 ? 1 + int64_t(rng() % uint64_t(vocab - 1)) : 0;
        logits[size_t(4 * vocab + top)] = 9.0f;
        logits[size_t(4 * vocab)] = NAN;
        if (top + 1 < vocab) logits[size_t(4 * vocab + top + 1)] = NAN;
        std::vector<int32_t> expected(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) expected[size_t(r)] = argmax(logits.data() + r * vocab, vocab);
        expected[3] = 0;
        expected[4] = int32_t(top);
        std::vector<float> padded(size_t(offset), 0.0f);
        padded.insert(padded.end(), logits.begin(), logits.end());
        cuda::DeviceBuffer d_logits(act, {int64_t(padded.size())});
        testing::upload_as(d_logits, padded, act);
        const void* first = static_cast<const char*>(d_logits.data()) + offset * dtype_size(act);
        cuda::DeviceBuffer out(DType::kI32, {rows});
        std::vector<int32_t> ids(static_cast<size_t>(rows)), again(static_cast<size_t>(rows));
        cuda::argmax_rows(out.as<int32_t>(), first, rows, vocab, act, nullptr);
        cuda::copy_to_host(ids.data(), out.data(), size_t(rows) * sizeof(int32_t));
        cuda::argmax_rows(out.as<int32_t>(), first, rows, vocab, act, nullptr);
        cuda::copy_to_host(again.data(), out.data(), size_t(rows) * sizeof(int32_t));
        const std::string where = std::string(dtype_name(act)) + " vocab " + std::to_string(vocab) + " offset " +
                                  std::to_string(offset);
        EXPECT_EQ(ids, expected) << where;
        EXPECT_EQ(again, ids) << where;
      }
    }
  }
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

TEST_F(SamplingCuda, GreedyRowsAreTheArgmax) {
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

TEST_F(SamplingCuda, FollowsTheSamplerDistribution) {
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
TEST_F(SamplingCuda, FollowsTheSamplerDistributionAtTheRealVocabulary) {
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
TEST_F(SamplingCuda, EqualsTheCpuTwin) {
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

TEST_F(SamplingCuda, SplitsTiedBoundariesById) {
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
TEST_F(SamplingCuda, DeterministicBySeedAndCounter) {
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
TEST_F(SamplingCuda, IntentMatchesWhatCuptiRecorded) {
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

}  // namespace
}  // namespace vt
