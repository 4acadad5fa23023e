// The MTP head on the CUDA model (issue 10, GPU side) against the CPU reference's, on golden tiny
// models given random `mtp.*` weights at test time (tests/speculative/mtp_test_support.h): the fc input
// kernel; the head's logits through the calls an MTP drafter makes (pairs from the target's kept
// hidden states after a chunked prefill and after verify steps rolled back to several accepted
// lengths, chained drafts, the head's own rollbacks) with f32 and bf16 activations and FP8 W8A8
// weights; greedy speculation with the MTP drafter giving exactly plain greedy tokens for
// k = 1..4, accepting drafts where the CPU reference does. Skips without a GPU unless
// VT_REQUIRE_GPU is set.
//
// Bounds (docs/numerics.md): the CUDA head is compared with the CPU head fed the CUDA model's own
// inputs (its target's kept hidden states, its head's outputs: the head's numerics, any activation
// dtype) within the CUDA-vs-CPU bound of the activations; with f32 activations also with the CPU
// head on the CPU target (the whole path) within kLogitsRelL2. Greedy speculation is exact: the
// golden models' linears run vt's row-wise GEMV for the verify steps of up to 5 rows, as in
// plain decoding (tests/cuda/test_cuda_spec.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../numerics.h"
#include "../speculative/mtp_test_support.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "cuda_test_support.h"
#include "io/json_config.h"
#include "model/generate.h"
#include "models/qwen3_5/model.h"
#include "ops/norm/norm.h"
#include "runtime/qwen3_5_cuda.h"
#include "speculative/mtp_drafter.h"
#include "speculative/speculative.h"

namespace vt {
namespace {

using testing::golden_config;
using testing::golden_prompt;
using testing::MtpCheckpoint;
using testing::random_mtp_tensors;
using testing::relative_l2;

const std::string kGolden = std::string(VT_SOURCE_DIR) + "/tests/golden/";
constexpr int64_t kMaxDrafts = 4;

class CudaMtpHead : public testing::GpuTest {};

std::unique_ptr<Qwen35Model> load_cpu(const std::string& dir) {
  Qwen35LoadOptions options;
  options.load_mtp = true;  // FP8 weights run W8A8, as on the GPU
  return std::make_unique<Qwen35Model>(dir, options);
}

// Rollback windows for a verify of kMaxDrafts drafts; three target and three head sequences (a
// drafter's start() frees its previous head sequence first).
std::unique_ptr<Qwen35CudaModel> load_cuda(const std::string& dir, DType activations, int64_t max_step_tokens) {
  CudaModelOptions options;
  options.activations = activations;
  options.max_sequences = 3;
  options.max_context = 256;
  options.max_step_tokens = max_step_tokens;
  options.max_logit_rows = kMaxDrafts + 1;
  options.max_rollback_tokens = kMaxDrafts + 1;
  options.load_mtp = true;
  return load_qwen35_cuda(dir, options);
}

std::vector<float> row(const Buffer& logits) { return {logits.f32(), logits.f32() + logits.numel()}; }

// The fc input: two rows RMS-normed side by side, against the CPU reference's norm of each.
TEST_F(CudaMtpHead, RmsNormConcatMatchesCpu) {
  for (DType act : {DType::kF32, DType::kBF16}) {
    for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 64}, {5, 256}, {17, 5120}, {3, 250}}) {
      std::mt19937 rng(uint32_t(rows * n));
      std::normal_distribution<float> normal;
      std::vector<float> a(static_cast<size_t>(rows * n)), b(a.size());
      std::vector<float> w_a(static_cast<size_t>(n)), w_b(static_cast<size_t>(n));
      for (auto* values : {&a, &b, &w_a, &w_b})
        for (float& v : *values) v = normal(rng);
      // The inputs as the device holds them (bf16-rounded), so both sides norm the same values.
      Buffer host_a(act, {rows, n}), host_b(act, {rows, n});
      for (int64_t i = 0; i < rows * n; ++i) {
        if (act == DType::kF32) {
          host_a.f32()[i] = a[i], host_b.f32()[i] = b[i];
        } else {
          host_a.view().as<uint16_t>()[i] = f32_to_bf16(a[i]), a[i] = bf16_to_f32(f32_to_bf16(a[i]));
          host_b.view().as<uint16_t>()[i] = f32_to_bf16(b[i]), b[i] = bf16_to_f32(f32_to_bf16(b[i]));
        }
      }
      std::vector<float> want(static_cast<size_t>(rows * 2 * n)), normed(static_cast<size_t>(rows * n));
      for (auto [input, weight, column] : {std::tuple{&a, &w_a, int64_t(0)}, std::tuple{&b, &w_b, n}}) {
        cpu::rms_norm(normed.data(), input->data(), weight->data(), rows, n, 1e-6f, 1.0f);
        for (int64_t r = 0; r < rows; ++r)
          std::copy(normed.begin() + r * n, normed.begin() + (r + 1) * n, want.begin() + r * 2 * n + column);
      }
      Buffer host_wa(DType::kF32, {n}), host_wb(DType::kF32, {n});
      std::copy(w_a.begin(), w_a.end(), host_wa.f32());
      std::copy(w_b.begin(), w_b.end(), host_wb.f32());
      auto d_a = cuda::to_device(host_a), d_b = cuda::to_device(host_b);
      auto d_wa = cuda::to_device(host_wa), d_wb = cuda::to_device(host_wb);
      cuda::DeviceBuffer d_out(act, {rows, 2 * n});
      cuda::rms_norm_concat(d_out.data(), d_a.data(), d_wa.as<float>(), d_b.data(), d_wb.as<float>(), rows, n, 1e-6f,
                            1.0f, act, nullptr);
      Buffer out(act, {rows, 2 * n});
      cuda::copy_to_host(out.view().data, d_out.data(), out.view().bytes());
      std::vector<float> got(want.size());
      for (size_t i = 0; i < got.size(); ++i)
        got[i] = act == DType::kF32 ? out.f32()[i] : bf16_to_f32(out.view().as<uint16_t>()[i]);
      // f32: the norm's fp32 arithmetic in another order (as NormCuda.RmsNormMatchesCpu); bf16:
      // each value within one bf16 ulp (2^-8 relative) of the f32 reference.
      if (act == DType::kF32) {
        EXPECT_LE(relative_l2(got, want), 1e-6) << rows << "x" << n;
      } else {
        int64_t outside = 0;
        for (size_t i = 0; i < got.size(); ++i) outside += std::fabs(got[i] - want[i]) > std::fabs(want[i]) / 256;
        EXPECT_EQ(outside, 0) << rows << "x" << n << " bf16";
      }
    }
  }
}

struct HeadCase {
  const char* name;
  DType activations;
  bool fp8;  // the golden FP8 model, the head's linears FP8 too (W8A8)
};

double bound(const HeadCase& c) {
  if (c.fp8) return numerics::kFp8W8A8RelL2;
  if (c.activations == DType::kF32) return numerics::kLogitsRelL2;
  return std::string(c.name) == "qwen3_5_moe" ? numerics::kCudaBf16MoeActivationsRelL2
                                               : numerics::kCudaBf16ActivationsRelL2;
}

// Both models side by side through the calls an MTP drafter makes with k = 3: a 40-token prefill
// (three 16-token steps on the GPU, so the kept hidden states and the head's first 40 pairs span
// chunks), then rounds of [new pairs from the kept states, two chained drafts, a verify of the
// last token + 3 drafts rolled back to 0, 3, 1 and 2 accepted]; the head rolls its chained entries
// back at the start of each round. Tokens come from the golden prompt (any token is a valid
// input; the drafter would feed its own argmax).
void check_head_against_cpu(const HeadCase& c) {
  const std::string label = std::string(c.name) + " " + std::string(dtype_name(c.activations)) + (c.fp8 ? " fp8" : "");
  SCOPED_TRACE(label);
  MtpCheckpoint checkpoint(c.name, random_mtp_tensors(golden_config(c.name), 7), c.fp8);
  auto cpu = load_cpu(checkpoint.dir());
  auto cuda = load_cuda(checkpoint.dir(), c.activations, /*max_step_tokens=*/16);
  ASSERT_TRUE(cuda->has_mtp());
  const std::vector<int32_t> ids = golden_prompt(c.name, 1);
  const int64_t V = cuda->info().vocab_size, H = cuda->config().hidden_size, prefill = 40, k = 3;
  ASSERT_GE(int64_t(ids.size()), prefill + 4 * (k + 1) + k);
  const bool end_to_end = c.activations == DType::kF32 && !c.fp8;
  cpu->set_keep_hidden_states(true);
  cuda->set_keep_hidden_states(true);
  auto cpu_target = cpu->new_sequence(128), cuda_target = cuda->new_sequence(128);
  auto cpu_head = cpu->new_mtp_sequence(128), cuda_head = cuda->new_mtp_sequence(128);
  auto isolated = cpu->new_mtp_sequence(128);  // the CPU head on the CUDA model's inputs
  Buffer target_logits(DType::kF32, {k + 1, V});
  Buffer cpu_logits(DType::kF32, {1, V}), cuda_logits(DType::kF32, {1, V}), isolated_logits(DType::kF32, {1, V});
  double worst_hidden = 0, worst_isolated = 0, worst_end_to_end = 0;

  // A target forward on both models; the kept hidden states (CUDA's, as f32) must cover the same
  // positions as the CPU's and agree with them.
  std::vector<float> kept;
  int64_t kept_start = 0;
  const auto target_forward = [&](std::span<const int32_t> tokens, const ForwardOptions& options) {
    const int64_t rows = options.all_logits ? int64_t(tokens.size()) : 1;
    cpu->forward(tokens, *cpu_target, target_logits.view().rows(0, rows), options);
    cuda->forward(tokens, *cuda_target, target_logits.view().rows(0, rows), options);
    const PositionRange want = cpu->kept_hidden_positions(), got = cuda->kept_hidden_positions();
    EXPECT_EQ(got.start, want.start);
    EXPECT_EQ(got.count, want.count);
    kept = cuda->kept_hidden_states();
    kept_start = got.start;
    const TensorView reference = cpu->last_hidden_states();
    const double error = relative_l2(kept, {reference.f32(), reference.f32() + reference.numel()});
    EXPECT_LE(error, bound(c)) << "kept hidden states of positions [" << got.start << ", " << got.end() << ")";
    worst_hidden = std::max(worst_hidden, error);
  };
  const auto compare = [&](const std::string& what) {
    const std::vector<float> got = row(cuda_logits);
    const double isolated_error = relative_l2(got, row(isolated_logits));
    const double end_to_end_error = relative_l2(got, row(cpu_logits));
    EXPECT_LE(isolated_error, bound(c)) << what << ": vs the CPU head on the same inputs";
    if (end_to_end) {
      EXPECT_LE(end_to_end_error, bound(c)) << what << ": vs the CPU target and head";
    }
    worst_isolated = std::max(worst_isolated, isolated_error);
    worst_end_to_end = std::max(worst_end_to_end, end_to_end_error);
  };

  target_forward(std::span<const int32_t>(ids.data(), prefill), {});
  int64_t pairs = 0, length = prefill;  // the head's target pairs; the target's tokens
  const int64_t accepted_per_round[] = {0, k, 1, 2};
  for (int round = 0; round <= 4; ++round) {
    // New pairs [pairs, length): hidden at p with the token at p + 1.
    for (SequenceState* head : {cpu_head.get(), isolated.get()}) cpu->mtp_rollback(*head, pairs);
    cuda->mtp_rollback(*cuda_head, pairs);
    EXPECT_EQ(cuda_head->length(), pairs);
    const std::span<const int32_t> tokens(ids.data() + pairs + 1, size_t(length - pairs));
    cpu->mtp_forward_from_target(tokens, pairs, *cpu_head, cpu_logits);
    cuda->mtp_forward_from_target(tokens, pairs, *cuda_head, cuda_logits);
    Buffer hidden_out(DType::kF32, {length - pairs, H});
    const TensorView hidden{kept.data() + (pairs - kept_start) * H, DType::kF32, Device::kCpu, {length - pairs, H}};
    cpu->mtp_forward(tokens, hidden, *isolated, hidden_out, isolated_logits);
    compare("round " + std::to_string(round) + ": pairs [" + std::to_string(pairs) + ", " + std::to_string(length) +
            ")");
    pairs = length;
    // Chained drafts on the head's own outputs.
    for (int64_t j = 1; j < k; ++j) {
      const int32_t token = ids[size_t(length + j)];
      std::vector<float> own = cuda->mtp_last_output(*cuda_head);
      cpu->mtp_forward_chained(token, *cpu_head, cpu_logits);
      cuda->mtp_forward_chained(token, *cuda_head, cuda_logits);
      Buffer out(DType::kF32, {1, H});
      cpu->mtp_forward(std::span<const int32_t>(&token, 1), TensorView{own.data(), DType::kF32, Device::kCpu, {1, H}},
                       *isolated, out, isolated_logits);
      compare("round " + std::to_string(round) + ": chained draft " + std::to_string(j));
    }
    EXPECT_EQ(cuda_head->length(), pairs + k - 1);
    if (round == 4) break;
    // Verify the last token + k drafts in a window, keep `accepted` of them.
    ForwardOptions verify;
    verify.all_logits = verify.keep_rollback = true;
    verify.delta_rule = DeltaRuleChoice::kRecurrent;
    target_forward(std::span<const int32_t>(ids.data() + length, size_t(k + 1)), verify);
    const int64_t accepted = accepted_per_round[round];
    cpu->rollback(*cpu_target, length + 1 + accepted);
    cpu->commit(*cpu_target);
    cuda->rollback(*cuda_target, length + 1 + accepted);
    cuda->commit(*cuda_target);
    length += 1 + accepted;
  }
  std::printf("%s: kept hidden rel L2 %.3g; head logits vs the CPU head on the same inputs %.3g, vs the CPU target "
              "and head %.3g (bound %.3g%s)\n",
              label.c_str(), worst_hidden, worst_isolated, worst_end_to_end, bound(c),
              end_to_end ? "" : "; the whole path is printed, not bounded");
}

TEST_F(CudaMtpHead, LogitsFollowTheCpuHeadF32) {
  check_head_against_cpu({"qwen3_5_dense", DType::kF32, false});
  check_head_against_cpu({"qwen3_5_moe", DType::kF32, false});
}

TEST_F(CudaMtpHead, LogitsFollowTheCpuHeadBf16) {
  check_head_against_cpu({"qwen3_5_dense", DType::kBF16, false});
  check_head_against_cpu({"qwen3_5_moe", DType::kBF16, false});
}

TEST_F(CudaMtpHead, LogitsFollowTheCpuHeadFp8) { check_head_against_cpu({"qwen3_5_fp8", DType::kF32, true}); }

// Greedy speculation with the MTP drafter gives the target's plain greedy tokens for k = 1..4, f32
// and bf16, both golden prompts, with a random head (drafts rejected) and a head fitted to the
// target's greedy path (testing::fitted_mtp_tensors: drafts accepted, first and chained, when the
// hidden states come from the right positions). It accepts drafts where the CPU reference (same
// checkpoint, prompts and k) does; with f32 activations the fitted head's as often as there.
TEST_F(CudaMtpHead, GreedySpeculationEqualsPlainGreedy) {
  for (const char* name : {"qwen3_5_dense", "qwen3_5_moe"}) {
    const std::vector<std::vector<int32_t>> prompts = {golden_prompt(name, 0), golden_prompt(name, 1)};
    for (bool fitted : {false, true}) {
      MtpCheckpoint checkpoint(name, fitted ? testing::fitted_mtp_tensors(name, prompts, 24, 19)
                                            : random_mtp_tensors(golden_config(name), 11));
      const std::string head = fitted ? "fitted head" : "random head";
      GenerateOptions options;
      options.max_new_tokens = 24;
      const auto speculative_options = [](int64_t k) {
        SpeculativeOptions speculative;
        speculative.num_draft = k;
        speculative.adaptive = k == kMaxDrafts;
        return speculative;
      };
      // The CPU reference's acceptance on the same prompts and k.
      int64_t cpu_accepted = 0, cpu_drafted = 0;
      {
        auto cpu = load_cpu(checkpoint.dir());
        for (const auto& prompt : prompts)
          for (int64_t k = 1; k <= kMaxDrafts; ++k) {
            MtpDrafter drafter(*cpu, {});
            const auto stats = generate_speculative(*cpu, drafter, prompt, options, speculative_options(k)).stats;
            cpu_accepted += stats.accepted;
            cpu_drafted += stats.drafted;
          }
      }
      for (DType act : {DType::kF32, DType::kBF16}) {
        const std::string what = std::string(name) + " " + head + " " + std::string(dtype_name(act));
        auto cuda = load_cuda(checkpoint.dir(), act, /*max_step_tokens=*/256);
        int64_t drafted = 0, accepted = 0;
        for (const auto& prompt : prompts) {
          const auto plain = generate(*cuda, prompt, options).output_ids;
          for (int64_t k = 1; k <= kMaxDrafts; ++k) {
            SCOPED_TRACE(what + " prompt " + std::to_string(prompt.size()) + " k " + std::to_string(k));
            MtpDrafter drafter(*cuda, {});
            const auto result = generate_speculative(*cuda, drafter, prompt, options, speculative_options(k));
            EXPECT_EQ(result.output_ids, plain);
            EXPECT_GT(result.stats.drafted, 0);
            drafted += result.stats.drafted;
            accepted += result.stats.accepted;
          }
        }
        std::printf("%s: MTP drafts accepted %lld of %lld (the CPU reference: %lld of %lld)\n", what.c_str(),
                    (long long)accepted, (long long)drafted, (long long)cpu_accepted, (long long)cpu_drafted);
        if (cpu_accepted > 0) {
          EXPECT_GT(accepted, 0) << what;
        }
        if (fitted && act == DType::kF32) {
          EXPECT_EQ(accepted, cpu_accepted) << what;
        }
      }
    }
  }
}

// A head sequence after a rollback to any length runs as a fresh one given the same pairs; misuse
// is refused (chaining without an output, pairs the target did not keep, no head loaded).
TEST_F(CudaMtpHead, RollbackAndRefusals) {
  MtpCheckpoint checkpoint("qwen3_5_dense", random_mtp_tensors(golden_config("qwen3_5_dense"), 5));
  auto cuda = load_cuda(checkpoint.dir(), DType::kF32, 256);
  const std::vector<int32_t> ids = golden_prompt("qwen3_5_dense", 1);
  const int64_t V = cuda->info().vocab_size, P = 20;
  cuda->set_keep_hidden_states(true);
  auto target = cuda->new_sequence(64);
  Buffer logits(DType::kF32, {1, V}), head_logits(DType::kF32, {1, V}), fresh_logits(DType::kF32, {1, V});
  cuda->forward(std::span<const int32_t>(ids.data(), P), *target, logits, {});
  EXPECT_EQ(cuda->kept_hidden_positions().start, 0);
  EXPECT_EQ(cuda->kept_hidden_positions().count, P);
  auto head = cuda->new_mtp_sequence(64);
  EXPECT_THROW(cuda->mtp_forward_chained(ids[1], *head, head_logits), Error);  // no output yet
  EXPECT_THROW(cuda->mtp_forward_from_target(std::span<const int32_t>(ids.data() + 2, P), 1, *head, head_logits),
               Error);  // pairs [1, P + 1) need position P's hidden state: not kept
  EXPECT_EQ(head->length(), 0);
  cuda->mtp_forward_from_target(std::span<const int32_t>(ids.data() + 1, P - 1), 0, *head, head_logits);
  for (int64_t j = 0; j < 3; ++j) cuda->mtp_forward_chained(ids[size_t(P + j)], *head, head_logits);
  for (int64_t keep : {P + 2, P - 1, int64_t(5), int64_t(0)}) {
    SCOPED_TRACE("rollback to " + std::to_string(keep));
    const bool drops = keep < head->length();
    cuda->mtp_rollback(*head, keep);
    EXPECT_EQ(head->length(), keep);
    // Chaining reads the output of the last pair: gone with it.
    if (drops) {
      EXPECT_THROW(cuda->mtp_forward_chained(ids[1], *head, head_logits), Error);
    }
    const int64_t first = std::min(keep, P - 2);
    cuda->mtp_rollback(*head, first);
    cuda->mtp_forward_from_target(std::span<const int32_t>(ids.data() + first + 1, size_t(P - 1 - first)), first,
                                  *head, head_logits);
    auto fresh = cuda->new_mtp_sequence(64);
    cuda->mtp_forward_from_target(std::span<const int32_t>(ids.data() + 1, P - 1), 0, *fresh, fresh_logits);
    // The same pairs in steps of other sizes (other GEMM and attention-split shapes): two paths.
    EXPECT_LE(relative_l2(row(head_logits), row(fresh_logits)), numerics::kSamePathRelL2);
  }
  EXPECT_THROW(cuda->mtp_rollback(*head, P), Error);  // longer than it is
  // forward_batch keeps none for the last forward (only per sequence, with keep_hidden): a drafter
  // proposing from the last forward after one is refused.
  std::vector<BatchItem> items = {{std::span<const int32_t>(&ids[P], 1), target.get(), false, false}};
  cuda->forward_batch(items, logits);
  EXPECT_EQ(cuda->kept_hidden_positions().count, 0);
  EXPECT_THROW(cuda->mtp_forward_from_target(std::span<const int32_t>(&ids[P], 1), P - 1, *head, head_logits), Error);

  CudaModelOptions plain;
  plain.activations = DType::kF32;
  plain.max_context = 64;
  auto without = load_qwen35_cuda(checkpoint.dir(), plain);  // mtp.* declared ignored
  EXPECT_FALSE(without->has_mtp());
  EXPECT_THROW(without->new_mtp_sequence(16), Error);
  try {
    MtpDrafter drafter(*without, {});
    ADD_FAILURE() << "an MTP drafter on a model without its head";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("loaded without its MTP head"), std::string::npos) << error.what();
  }
  CudaModelOptions asked = plain;
  asked.load_mtp = true;
  try {
    load_qwen35_cuda(kGolden + "qwen3_5_dense", asked);
    ADD_FAILURE() << "load_mtp on a checkpoint without mtp.*";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no MTP head (no mtp.fc.weight)"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace vt
