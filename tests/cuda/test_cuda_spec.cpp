// Speculative decoding on the CUDA model (issue 10, GPU side): rollback from per-token GDN state
// checkpoints gives the logits of never having drafted; greedy speculation (n-gram, draft model,
// partly wrong drafts; k = 1..8) gives the tokens of plain greedy decoding with f32 and bf16
// activations, at batch 1 and as a batched verify of 16 sequences; sampled speculation keeps the
// target's distribution. Skips without a GPU unless VT_REQUIRE_GPU is set.
//
// Bit-exactness: the golden models' linears are all narrow enough for vt's row-wise dense GEMV,
// which computes each row alike for 1..8 rows, so a verify of up to 8 tokens gives the logits of
// decoding them one by one, bit for bit. A 9-token verify (k = 8) and batched steps run cuBLASLt,
// whose sums differ from the GEMV's in the last bits: there f32 is held to kSamePathRelL2 and equal
// greedy tokens, and bf16 to equal tokens except at a near tie of the plain decode's logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../numerics.h"
#include "../speculative/spec_test_support.h"
#include "cuda_test_support.h"
#include "io/json_config.h"
#include "model/generate.h"
#include "ops/sampling/sampler.h"
#include "runtime/qwen3_5_cuda.h"
#include "speculative/draft_model_drafter.h"
#include "speculative/ngram_drafter.h"
#include "speculative/speculative.h"

namespace vt {
namespace {

using testing::relative_l2;

const std::string kGolden = std::string(VT_SOURCE_DIR) + "/tests/golden/";
const char* const kHybridModels[] = {"qwen3_5_dense", "qwen3_5_moe", "qwen3_next"};
constexpr int64_t kMaxDrafts = 8;

class CudaSpec : public testing::GpuTest {};

std::vector<std::vector<int32_t>> golden_prompts(const std::string& name) {
  std::vector<std::vector<int32_t>> prompts;
  const nlohmann::json reference = read_json_file(kGolden + name + "/reference.json");
  for (const auto& prompt : reference["prompts"]) prompts.push_back(prompt["ids"].get<std::vector<int32_t>>());
  return prompts;
}

// A golden model with rollback windows for a verify of kMaxDrafts drafts. Three sequences: the
// target's, a draft model's on the same model, and the next one a drafter's start() makes before
// it drops its previous one.
std::unique_ptr<Qwen35CudaModel> load_golden(const std::string& name, DType activations, int64_t sequences = 3) {
  CudaModelOptions options;
  options.activations = activations;
  options.max_sequences = sequences;
  options.max_context = 256;
  options.max_step_tokens = 256;
  options.max_logit_rows = sequences * (kMaxDrafts + 1);
  options.max_rollback_tokens = kMaxDrafts + 1;
  return load_qwen35_cuda(kGolden + name, options);
}

std::vector<float> row(const Buffer& logits, int64_t index) {
  const int64_t vocab = logits.shape()[1];
  return {logits.f32() + index * vocab, logits.f32() + (index + 1) * vocab};
}

// Last-token logits of `prefix` as one prefill, then `rest` one token at a time (plain decoding).
std::vector<float> decoded_logits(Model& model, const std::vector<int32_t>& prefix, const std::vector<int32_t>& rest) {
  auto state = model.new_sequence(int64_t(prefix.size() + rest.size()));
  Buffer logits(DType::kF32, {1, model.info().vocab_size});
  model.forward(prefix, *state, logits, {});
  for (int32_t token : rest) model.forward(std::span<const int32_t>(&token, 1), *state, logits, {});
  return row(logits, 0);
}

// Equal bit for bit where the step shapes allow it (see the top), else within kSamePathRelL2
// (f32) or the bf16-activation bound.
void expect_same_logits(const std::vector<float>& got, const std::vector<float>& want, bool exact, DType act,
                        const std::string& what) {
  if (exact) {
    EXPECT_TRUE(got == want) << what << ": rel L2 " << relative_l2(got, want) << ", expected bit-identical";
  } else {
    // A verify of more than 8 rows runs cuBLASLt where plain decoding runs vt's row GEMV: two
    // GEMM paths, so the CUDA-vs-reference f32 bound (measured 1.03e-5 on the H200), not kSamePathRelL2.
    EXPECT_LE(relative_l2(got, want), act == DType::kF32 ? numerics::kLogitsRelL2 : numerics::kCudaBf16ActivationsRelL2)
        << what;
  }
}

// A verify of [t, d1..dk] inside a rollback window, rolled back to every accepted prefix
// a = 0..k+1 and committed, then one more token: its logits are those of never having drafted,
// and the verify's own rows those of decoding token by token.
TEST_F(CudaSpec, RollbackToEveryPositionEqualsAFreshRun) {
  for (DType act : {DType::kF32, DType::kBF16}) {
    for (const char* name : kHybridModels) {
      auto model = load_golden(name, act);
      ASSERT_TRUE(model->supports_rollback());
      const int64_t vocab = model->info().vocab_size;
      const std::vector<int32_t> prompt = golden_prompts(name).back();
      const std::vector<int32_t> prefix(prompt.begin(), prompt.begin() + 20);
      const int32_t next = prompt[40];
      for (int64_t k : {kMaxDrafts - 1, kMaxDrafts}) {
        SCOPED_TRACE(std::string(name) + " " + std::string(dtype_name(act)) + " k " + std::to_string(k));
        const bool exact = k + 1 <= 8;
        const std::vector<int32_t> verify(prompt.begin() + 20, prompt.begin() + 20 + k + 1);
        for (int64_t keep = 0; keep <= k + 1; ++keep) {
          auto state = model->new_sequence(64);
          Buffer logits(DType::kF32, {k + 1, vocab});
          model->forward(prefix, *state, logits.view().rows(0, 1), {});
          ForwardOptions options;
          options.all_logits = options.keep_rollback = true;
          model->forward(verify, *state, logits, options);
          EXPECT_EQ(state->rollback_floor(), int64_t(prefix.size()));
          if (keep == 0 && (exact || act == DType::kF32))
            for (int64_t r = 0; r <= k; ++r)
              // Row r holds the logits after verify[r]: the prefix plus verify[0..r] decoded.
              expect_same_logits(row(logits, r),
                                 decoded_logits(*model, prefix, {verify.begin(), verify.begin() + r + 1}), exact, act,
                                 "verify row " + std::to_string(r));
          model->rollback(*state, int64_t(prefix.size()) + keep);
          model->commit(*state);
          EXPECT_EQ(state->length(), int64_t(prefix.size()) + keep);
          EXPECT_EQ(state->rollback_floor(), state->length());
          model->forward(std::span<const int32_t>(&next, 1), *state, logits.view().rows(0, 1), {});
          std::vector<int32_t> rest(verify.begin(), verify.begin() + keep);
          rest.push_back(next);
          // The next token's step has one row either way: exact whenever the verify was.
          expect_same_logits(row(logits, 0), decoded_logits(*model, prefix, rest), exact, act,
                             "after rollback to " + std::to_string(keep));
        }
      }
    }
  }
}

// Several forwards and rollbacks inside one window (as a draft model runs), the window's bounds,
// a window longer than max_rollback_tokens refused with the state untouched, and a model built
// without windows refusing speculation.
TEST_F(CudaSpec, RollbackWindowBoundsAndRepeatedRollbacks) {
  auto model = load_golden("qwen3_5_dense", DType::kF32);
  const int64_t vocab = model->info().vocab_size;
  const std::vector<int32_t> ids = golden_prompts("qwen3_5_dense").back();
  const std::vector<int32_t> prefix(ids.begin(), ids.begin() + 10);
  auto state = model->new_sequence(64);
  Buffer logits(DType::kF32, {1, vocab});
  model->forward(prefix, *state, logits, {});
  ForwardOptions keep;
  keep.keep_rollback = true;
  for (int i = 10; i < 14; ++i) model->forward(std::span<const int32_t>(&ids[i], 1), *state, logits, keep);
  model->rollback(*state, 12);  // keep ids[10], ids[11]
  model->forward(std::span<const int32_t>(&ids[40], 2), *state, logits, keep);  // 14 tokens
  model->rollback(*state, 13);  // ..., ids[11], ids[40]
  EXPECT_EQ(state->rollback_floor(), 10);
  EXPECT_THROW(model->rollback(*state, 9), Error);
  EXPECT_THROW(model->rollback(*state, 14), Error);
  // The window holds max_rollback_tokens = 9 tokens from length 10: 6 more fit, 7 do not.
  const std::vector<int32_t> seven(ids.begin() + 60, ids.begin() + 67);
  try {
    model->forward(seven, *state, logits, keep);
    ADD_FAILURE() << "a 10-token window was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("exceeds max_rollback_tokens 9"), std::string::npos) << error.what();
  }
  EXPECT_EQ(state->length(), 13);
  EXPECT_EQ(state->rollback_floor(), 10);
  model->forward(std::span<const int32_t>(&ids[50], 1), *state, logits, {});  // closes the window
  EXPECT_EQ(state->rollback_floor(), 14);
  EXPECT_THROW(model->rollback(*state, 13), Error);
  EXPECT_TRUE(row(logits, 0) == decoded_logits(*model, prefix, {ids[10], ids[11], ids[40], ids[50]}));

  CudaModelOptions plain;
  plain.activations = DType::kF32;
  plain.max_context = 64;
  auto without = load_qwen35_cuda(kGolden + "qwen3_5_dense", plain);
  EXPECT_FALSE(without->supports_rollback());
  auto other = without->new_sequence(32);
  try {
    without->forward(prefix, *other, logits, keep);
    ADD_FAILURE() << "keep_rollback without windows was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("max_rollback_tokens"), std::string::npos) << error.what();
  }
  EXPECT_THROW(without->rollback(*other, 0), Error);
  NgramDrafter drafter;
  EXPECT_THROW(generate_speculative(*without, drafter, prefix, {}, {}), Error);
}

using testing::plain_greedy;
using testing::SometimesWrongDrafter;

// Where `got` first differs from plain greedy `want`, the plain decode's two best logits there are
// within bf16 noise of each other (a near tie that a last-bit difference may flip).
void expect_same_or_near_tie(Model& model, const std::vector<int32_t>& prompt, const std::vector<int32_t>& want,
                             const std::vector<int32_t>& got, const std::string& what) {
  const auto differ = std::mismatch(want.begin(), want.end(), got.begin(), got.end());
  if (differ.first == want.end() && got.size() == want.size()) return;
  ASSERT_EQ(got.size(), want.size()) << what;
  const int64_t at = differ.first - want.begin();
  const auto logits = decoded_logits(model, prompt, {want.begin(), want.begin() + at});  // what chose want[at]
  std::vector<float> sorted = logits;
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  float scale = 0;
  for (float v : logits) scale = std::max(scale, std::fabs(v));
  EXPECT_LE(sorted[0] - sorted[1], 3e-2f * scale)
      << what << ": differs from plain greedy at token " << at << " where the plain decode's top two logits are "
      << sorted[0] << " and " << sorted[1] << " (not a near tie)";
  std::printf("%s: near tie at token %lld (%g vs %g)\n", what.c_str(), (long long)at, sorted[0], sorted[1]);
}

// Greedy speculation gives plain greedy's tokens for every drafter and k = 1..8 on both golden
// prompts: n-gram drafts, the target drafting for itself on a second sequence (all accepted),
// partly wrong drafts (every accepted length), and another golden model as the draft model.
void check_greedy_lossless(const char* name, DType act, int64_t count) {
  auto target = load_golden(name, act);
  auto other = load_golden(std::string(name) == "qwen3_5_dense" ? "qwen3_5_moe" : "qwen3_5_dense", act);
  int64_t partial_drafted = 0, partial_accepted = 0;
  for (const auto& prompt : golden_prompts(name)) {
    const auto want = plain_greedy(*target, prompt, count);
    GenerateOptions options;
    options.max_new_tokens = count;
    for (int64_t k = 1; k <= kMaxDrafts; ++k) {
      const std::string what = std::string(name) + " " + std::string(dtype_name(act)) + " prompt " + std::to_string(prompt.size()) +
                               " k " + std::to_string(k);
      SCOPED_TRACE(what);
      // Exact unless a 9-token verify (cuBLASLt) meets bf16 rounding: see the top.
      const auto check = [&](const std::vector<int32_t>& got, const char* drafter) {
        if (act == DType::kF32 || k + 1 <= 8) {
          EXPECT_EQ(got, want) << drafter;
        } else {
          expect_same_or_near_tie(*target, prompt, want, got, what + " " + drafter);
        }
      };
      SpeculativeOptions speculative;
      speculative.num_draft = k;
      NgramDrafter ngram({1, 3});
      check(generate_speculative(*target, ngram, prompt, options, speculative).output_ids, "ngram");

      DraftModelDrafter self(*target, {});
      auto result = generate_speculative(*target, self, prompt, options, speculative);
      check(result.output_ids, "draft = target");
      if (act == DType::kF32 || k + 1 <= 8) {
        EXPECT_EQ(result.stats.accepted, result.stats.drafted) << "the target drafting for itself";
      }

      SometimesWrongDrafter partial(*target);
      result = generate_speculative(*target, partial, prompt, options, speculative);
      check(result.output_ids, "partially right drafts");
      partial_drafted += result.stats.drafted;
      partial_accepted += result.stats.accepted;
      if (k <= 4) {
        for (int64_t a = 0; a <= k; ++a) EXPECT_GT(result.stats.accepted_histogram[a], 0) << a << " accepted";
      }

      DraftModelDrafter drafter(*other, {});
      speculative.adaptive = k % 2 == 0;
      check(generate_speculative(*target, drafter, prompt, options, speculative).output_ids, "draft = other model");
    }
  }
  EXPECT_GT(partial_accepted, partial_drafted / 4) << name;
  EXPECT_LT(partial_accepted, partial_drafted) << name;
}

TEST_F(CudaSpec, GreedyLosslessF32Dense) { check_greedy_lossless("qwen3_5_dense", DType::kF32, 32); }
TEST_F(CudaSpec, GreedyLosslessF32MoeAndNext) {
  check_greedy_lossless("qwen3_5_moe", DType::kF32, 32);
  check_greedy_lossless("qwen3_next", DType::kF32, 32);
}
TEST_F(CudaSpec, GreedyLosslessBf16) {
  for (const char* name : kHybridModels) check_greedy_lossless(name, DType::kBF16, 32);
}

// Batch 16 in lockstep: each sequence verifies its own number of drafts (0..8, partly wrong) in
// one batched step through verify_greedy (device argmax of every row; sequences without drafts run
// without a window), rolls back to what it accepted and commits; every sequence ends with its
// plain greedy tokens. f32 only: the batched step's cuBLASLt sums differ in the last bits from
// single-sequence decoding, which bf16 rounding can turn into a flipped near tie.
TEST_F(CudaSpec, BatchedVerifyOf16SequencesIsLossless) {
  constexpr int64_t kBatch = 16, kCount = 24;
  auto model = load_golden("qwen3_5_dense", DType::kF32, kBatch);
  const std::vector<int32_t> source = golden_prompts("qwen3_5_dense").back();
  std::vector<std::vector<int32_t>> prompts, want, got(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) {
    prompts.emplace_back(source.begin() + i, source.begin() + 8 + 3 * i);  // 8..53 tokens
    want.push_back(plain_greedy(*model, prompts.back(), kCount));
  }
  std::vector<std::unique_ptr<SequenceState>> states;
  Buffer logits(DType::kF32, {1, model->info().vocab_size});
  for (int64_t i = 0; i < kBatch; ++i) {
    states.push_back(model->new_sequence(int64_t(prompts[i].size()) + kCount + kMaxDrafts + 1));
    model->forward(prompts[i], *states[i], logits, {});
    got[i].push_back(argmax(logits.f32(), model->info().vocab_size));
  }
  std::vector<int64_t> accepted_histogram(kMaxDrafts + 1, 0);
  for (int64_t step = 0; std::any_of(got.begin(), got.end(), [&](const auto& g) { return int64_t(g.size()) < kCount; });
       ++step) {
    std::vector<std::vector<int32_t>> tokens(kBatch);
    std::vector<BatchItem> items;
    std::vector<int64_t> index, drafts(kBatch, 0), lengths(kBatch, 0);
    for (int64_t i = 0; i < kBatch; ++i) {
      const int64_t done = int64_t(got[i].size());
      if (done >= kCount) continue;
      // Drafts: the plain greedy continuation, one made wrong at a cycling position.
      drafts[i] = std::min<int64_t>((i + step) % (kMaxDrafts + 1), kCount - done - 1);
      tokens[i].push_back(got[i].back());
      for (int64_t d = 0; d < drafts[i]; ++d) tokens[i].push_back(want[i][done + d]);
      const int64_t wrong = (i * 3 + step) % (kMaxDrafts + 1);
      if (wrong < drafts[i]) tokens[i][1 + wrong] = (tokens[i][1 + wrong] + 1) % int32_t(model->info().vocab_size);
      lengths[i] = states[i]->length();
      items.push_back({tokens[i], states[i].get(), drafts[i] > 0});
      index.push_back(i);
    }
    std::vector<int32_t> next;
    model->verify_greedy(items, &next);
    size_t row_at = 0;
    for (int64_t i : index) {
      int64_t accepted = 0;
      for (; accepted <= drafts[i]; ++accepted) {
        const int32_t emitted = next[row_at + size_t(accepted)];
        got[i].push_back(emitted);
        if (int64_t(got[i].size()) == kCount || accepted == drafts[i] || emitted != tokens[i][1 + accepted]) break;
      }
      row_at += tokens[i].size();
      accepted = std::min(accepted, drafts[i]);
      ++accepted_histogram[accepted];
      if (drafts[i] > 0) {
        model->rollback(*states[i], lengths[i] + 1 + accepted);
        model->commit(*states[i]);
      }
    }
  }
  for (int64_t i = 0; i < kBatch; ++i) {
    got[i].resize(std::min<size_t>(got[i].size(), kCount));
    EXPECT_EQ(got[i], want[i]) << "sequence " << i;
  }
  for (int64_t a = 0; a <= 4; ++a) EXPECT_GT(accepted_histogram[a], 0) << a << " accepted";
}

// Real 27B layer shapes (48 value heads of 128 x 128, conv 10,240 channels), FP8: a window
// filled by nine single-token forwards (the draft model's pattern) and rolled back to every
// position gives bit for bit the logits of decoding only the kept tokens (every step M = 1). Then
// a 9-token verify (M = 9: another FP8 GEMM kernel, so within the W8A8 bound) rolled back likewise.
TEST_F(CudaSpec, RealShapesRollback) {
  Qwen35Config config = synthetic_config("qwen3.5-27b");
  config.num_layers = 4;
  config.layer_types.resize(4);
  config.vocab_size = 4096;
  CudaModelOptions options;
  options.max_sequences = 2;
  options.max_context = 64;
  options.max_step_tokens = 16;
  options.max_logit_rows = 10;
  options.max_rollback_tokens = kMaxDrafts + 1;
  options.tune_gemms = false;
  Qwen35CudaModel model(config, synthetic_cuda_weights(config, true, 17), options, "synthetic");
  const int64_t vocab = config.vocab_size;
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(int32_t((i * 7919 + 11) % vocab));
  const std::vector<int32_t> prefix(ids.begin(), ids.begin() + 12), window(ids.begin() + 12, ids.begin() + 21);
  const int32_t next = ids[30];
  Buffer logits(DType::kF32, {int64_t(window.size()), vocab});
  for (bool one_step : {false, true}) {
    for (int64_t keep = 0; keep <= int64_t(window.size()); ++keep) {
      SCOPED_TRACE(std::string(one_step ? "9-token verify" : "single-token forwards") + ", keep " + std::to_string(keep));
      auto state = model.new_sequence(48);
      model.forward(prefix, *state, logits.view().rows(0, 1), {});
      ForwardOptions options_keep;
      options_keep.keep_rollback = true;
      if (one_step) {
        model.forward(window, *state, logits.view().rows(0, 1), options_keep);
      } else {
        for (int32_t token : window)
          model.forward(std::span<const int32_t>(&token, 1), *state, logits.view().rows(0, 1), options_keep);
      }
      model.rollback(*state, int64_t(prefix.size()) + keep);
      model.commit(*state);
      model.forward(std::span<const int32_t>(&next, 1), *state, logits.view().rows(0, 1), {});
      std::vector<int32_t> rest(window.begin(), window.begin() + keep);
      rest.push_back(next);
      const auto want = decoded_logits(model, prefix, rest);
      if (one_step) {
        EXPECT_LE(relative_l2(row(logits, 0), want), numerics::kFp8W8A8RelL2);
      } else {
        EXPECT_TRUE(row(logits, 0) == want) << "rel L2 " << relative_l2(row(logits, 0), want);
      }
    }
  }
}

// The CPU suite's statistical check (tests/speculative/spec_test_support.h) on the CUDA model.
TEST_F(CudaSpec, SampledTokensFollowTheTargetDistribution) {
  auto target = load_golden("qwen3_5_dense", DType::kF32);
  testing::expect_speculative_sampling_follows_target(*target, golden_prompts("qwen3_5_dense")[0], "cuda");
}

}  // namespace
}  // namespace vt
