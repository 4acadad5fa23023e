// Speculative decoding on the golden tiny models: Model rollback restores exactly the state of
// never having drafted; greedy speculative output equals plain greedy output for every drafter
// and k = 1..8; sampled output follows the target's distribution (chi-square).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../numerics.h"
#include "io/json_config.h"
#include "model/generate.h"
#include "models/registry.h"
#include "spec_test_support.h"
#include "speculative/draft_model_drafter.h"
#include "speculative/ngram_drafter.h"
#include "speculative/speculative.h"

namespace vt {
namespace {

const std::string kGoldenDir = std::string(VT_SOURCE_DIR) + "/tests/golden/";
const char* const kHybridModels[] = {"qwen3_5_dense", "qwen3_5_moe", "qwen3_next"};

std::unique_ptr<Model> load_golden(const std::string& name) {
  return name == "tiny_llama" ? load_model(kGoldenDir + "gguf/tiny_llama.gguf", {})
                              : load_model(kGoldenDir + name, {});
}

std::vector<std::vector<int32_t>> golden_prompts(const std::string& name) {
  if (name == "tiny_llama")
    return {read_json_file(kGoldenDir + "gguf/tiny_llama.json")["ids"].get<std::vector<int32_t>>()};
  std::vector<std::vector<int32_t>> prompts;
  const nlohmann::json reference = read_json_file(kGoldenDir + name + "/reference.json");
  for (const auto& prompt : reference["prompts"])
    prompts.push_back(prompt["ids"].get<std::vector<int32_t>>());
  return prompts;
}

double relative_l2(const float* a, const float* b, int64_t count) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < count; ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

// Logits of the last token after running `tokens` one prefill + token-by-token decode.
std::vector<float> reference_logits(Model& model, const std::vector<int32_t>& prefix,
                                    const std::vector<int32_t>& rest) {
  const int64_t vocab = model.info().vocab_size;
  auto state = model.new_sequence(int64_t(prefix.size() + rest.size()));
  Buffer logits(DType::kF32, {1, vocab});
  model.forward(prefix, *state, logits, {});
  for (int32_t token : rest) model.forward(std::span<const int32_t>(&token, 1), *state, logits, {});
  return {logits.f32(), logits.f32() + vocab};
}

// A verify forward of [t, d1..dk] inside a rollback window, rolled back to every accepted prefix
// a = 0..k+1, then one more token: the logits equal those of never having drafted. The verify
// forward's own logits equal token-by-token decoding's.
TEST(Rollback, AnyAcceptedPrefixEqualsNeverHavingDrafted) {
  for (const char* name : {"qwen3_5_dense", "qwen3_5_moe", "qwen3_next", "tiny_llama"}) {
    SCOPED_TRACE(name);
    auto model = load_golden(name);
    ASSERT_TRUE(model->supports_rollback());
    const int64_t vocab = model->info().vocab_size, k = 5;
    const std::vector<int32_t> prompt = golden_prompts(name).back();
    const std::vector<int32_t> prefix(prompt.begin(), prompt.begin() + 20);
    const std::vector<int32_t> verify(prompt.begin() + 20,
                                      prompt.begin() + 20 + k + 1);  // t, d1..dk
    const int32_t next = prompt[30];
    double worst = 0;
    for (int64_t keep = 0; keep <= k + 1; ++keep) {
      auto state = model->new_sequence(64);
      Buffer logits(DType::kF32, {k + 1, vocab});
      model->forward(prefix, *state, logits.view().rows(0, 1), {});
      ForwardOptions options;
      options.all_logits = options.keep_rollback = true;
      options.delta_rule = DeltaRuleChoice::kRecurrent;
      model->forward(verify, *state, logits, options);
      if (keep == 0)
        for (int64_t row = 0; row <= k; ++row) {
          auto want = reference_logits(*model, prefix, {verify.begin(), verify.begin() + row + 1});
          worst = std::max(worst, relative_l2(logits.f32() + row * vocab, want.data(), vocab));
        }
      model->rollback(*state, int64_t(prefix.size()) + keep);
      model->commit(*state);
      EXPECT_EQ(state->length(), int64_t(prefix.size()) + keep);
      EXPECT_EQ(state->rollback_floor(), name == std::string("tiny_llama") ? 0 : state->length());
      model->forward(std::span<const int32_t>(&next, 1), *state, logits.view().rows(0, 1), {});
      std::vector<int32_t> rest(verify.begin(), verify.begin() + keep);
      rest.push_back(next);
      auto want = reference_logits(*model, prefix, rest);
      worst = std::max(worst, relative_l2(logits.f32(), want.data(), vocab));
    }
    EXPECT_LE(worst, numerics::kSamePathRelL2);
    std::printf("%s: verify + rollback vs never drafted, worst rel L2 %.3g\n", name, worst);
  }
}

// Several forwards and rollbacks inside one window (as a draft model does), then bounds.
TEST(Rollback, RepeatedRollbacksInOneWindowAndItsBounds) {
  for (const char* name : kHybridModels) {
    SCOPED_TRACE(name);
    auto model = load_golden(name);
    const int64_t vocab = model->info().vocab_size;
    const std::vector<int32_t> ids = golden_prompts(name).back();
    const std::vector<int32_t> prefix(ids.begin(), ids.begin() + 10);
    auto state = model->new_sequence(64);
    Buffer logits(DType::kF32, {1, vocab});
    model->forward(prefix, *state, logits, {});
    ForwardOptions keep;
    keep.keep_rollback = true;
    for (int i = 10; i < 14; ++i)
      model->forward(std::span<const int32_t>(&ids[i], 1), *state, logits, keep);
    model->rollback(*state, 12);  // keep ids[10], ids[11]
    model->forward(std::span<const int32_t>(&ids[40], 2), *state, logits, keep);  // 14 tokens
    model->rollback(*state, 13);  // ..., ids[11], ids[40]
    EXPECT_EQ(state->rollback_floor(), 10);
    EXPECT_THROW(model->rollback(*state, 9), Error);
    EXPECT_THROW(model->rollback(*state, 14), Error);
    model->forward(std::span<const int32_t>(&ids[50], 1), *state, logits, {});  // closes the window
    EXPECT_EQ(state->rollback_floor(), 14);
    EXPECT_THROW(model->rollback(*state, 13), Error);
    auto want = reference_logits(*model, prefix, {ids[10], ids[11], ids[40], ids[50]});
    EXPECT_LE(relative_l2(logits.f32(), want.data(), vocab), numerics::kSamePathRelL2);
  }
}

// A backend that does not implement rollback says so (the CUDA model built without rollback
// windows refuses keep_rollback itself: tests/cuda/test_cuda_spec.cpp).
TEST(Rollback, DefaultIsAClearError) {
  struct NoRollback final : Model {
    ModelInfo model_info{"test-arch", 4, 8};
    const ModelInfo& info() const override { return model_info; }
    std::unique_ptr<SequenceState> new_sequence(int64_t) const override { return nullptr; }
    void forward(std::span<const int32_t>, SequenceState&, const TensorView&,
                 const ForwardOptions&) override {}
    std::string describe() const override { return ""; }
  } model;
  EXPECT_FALSE(model.supports_rollback());
  SequenceState state;
  try {
    model.rollback(state, 0);
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("not supported by this backend (test-arch)"),
              std::string::npos);
  }
  EXPECT_THROW(model.commit(state), Error);
  NgramDrafter drafter;
  EXPECT_THROW(generate_speculative(model, drafter, std::vector<int32_t>{1}, {}, {}), Error);
}

using testing::plain_greedy;
using testing::SometimesWrongDrafter;

void check_stats(const SpeculativeResult& result, int64_t k) {
  const auto& stats = result.stats;
  int64_t steps = 0, accepted = 0, drafted = 0;
  for (size_t a = 0; a < stats.accepted_histogram.size(); ++a)
    steps += stats.accepted_histogram[a], accepted += int64_t(a) * stats.accepted_histogram[a];
  for (int64_t i = 0; i < k; ++i) {
    drafted += stats.drafted_at[i];
    EXPECT_LE(stats.accepted_at[i], stats.drafted_at[i]);
    if (i > 0) {
      EXPECT_LE(stats.drafted_at[i], stats.drafted_at[i - 1]);
    }
  }
  EXPECT_EQ(steps, stats.steps);
  EXPECT_EQ(accepted, stats.accepted);
  EXPECT_EQ(drafted, stats.drafted);
  EXPECT_EQ(stats.emitted,
            int64_t(result.output_ids.size()) - 1);  // the first comes from the prefill
}

struct Totals {
  int64_t drafted = 0, accepted = 0, steps = 0, emitted = 0;
  void add(const SpeculativeStats& stats) {
    drafted += stats.drafted, accepted += stats.accepted, steps += stats.steps,
        emitted += stats.emitted;
  }
};

// Greedy speculation is lossless: the same ids as plain greedy decoding, for each drafter,
// k = 1..8, on both golden prompts of each hybrid model (and the tiny Llama).
TEST(SpeculativeGreedy, IdenticalToPlainDecodingForEveryDrafterAndK) {
  const int64_t count = 40;
  for (const char* name : {"qwen3_5_dense", "qwen3_5_moe", "qwen3_next", "tiny_llama"}) {
    auto target = load_golden(name);
    // Drafts from another model of the same vocabulary (mostly wrong), and from the target itself
    // on its own sequence (always right: every step takes the bonus token).
    auto other =
        load_golden(name == std::string("qwen3_5_dense") ? "qwen3_5_moe" : "qwen3_5_dense");
    const bool same_vocab = other->info().vocab_size == target->info().vocab_size;
    Totals ngram_totals, other_totals, partial_totals;
    for (const auto& prompt : golden_prompts(name)) {
      const auto want = plain_greedy(*target, prompt, count);
      GenerateOptions options;
      options.max_new_tokens = count;
      for (int64_t k = 1; k <= 8; ++k) {
        SCOPED_TRACE(std::string(name) + " prompt " + std::to_string(prompt.size()) + " k " +
                     std::to_string(k));
        SpeculativeOptions speculative;
        speculative.num_draft = k;
        NgramDrafter ngram({1, 3});
        auto result = generate_speculative(*target, ngram, prompt, options, speculative);
        EXPECT_EQ(result.output_ids, want) << "ngram";
        check_stats(result, k);
        ngram_totals.add(result.stats);

        DraftModelDrafter self(*target, {});
        result = generate_speculative(*target, self, prompt, options, speculative);
        EXPECT_EQ(result.output_ids, want) << "draft = target";
        check_stats(result, k);
        EXPECT_EQ(result.stats.accepted, result.stats.drafted) << "the target drafting for itself";

        SometimesWrongDrafter partial(*target);
        result = generate_speculative(*target, partial, prompt, options, speculative);
        EXPECT_EQ(result.output_ids, want) << "partially right drafts";
        check_stats(result, k);
        partial_totals.add(result.stats);
        if (k <= 4) {
          for (int64_t a = 0; a <= k; ++a)
            EXPECT_GT(result.stats.accepted_histogram[a], 0) << a << " accepted";
        }

        if (same_vocab) {
          DraftModelDrafter drafter(*other, {});
          speculative.adaptive = k % 2 == 0;
          result = generate_speculative(*target, drafter, prompt, options, speculative);
          EXPECT_EQ(result.output_ids, want) << "draft = other model";
          check_stats(result, k);
          other_totals.add(result.stats);
        }
      }
    }
    std::printf(
        "%s: drafts accepted: ngram %lld of %lld, other model %lld of %lld, partially right %lld "
        "of %lld\n",
        name, (long long)ngram_totals.accepted, (long long)ngram_totals.drafted,
        (long long)other_totals.accepted, (long long)other_totals.drafted,
        (long long)partial_totals.accepted, (long long)partial_totals.drafted);
    // Random tiny models rarely repeat themselves, so the n-gram drafts are mostly wrong here (the
    // SmolLM2 test below has them right); the partially right drafter exercises every prefix.
    EXPECT_GT(partial_totals.accepted, partial_totals.drafted / 4) << name;
    EXPECT_LT(partial_totals.accepted, partial_totals.drafted) << name;
  }
}

TEST(SpeculativeGreedy, StopsAtStopTokensAndMaxTokensLikePlainDecoding) {
  auto target = load_golden("qwen3_5_dense");
  const auto prompt = golden_prompts("qwen3_5_dense")[0];
  const auto plain = plain_greedy(*target, prompt, 30);
  GenerateOptions options;
  options.max_new_tokens = 30;
  options.stop_token_ids = {plain[17]};
  const auto want = generate(*target, prompt, options).output_ids;
  ASSERT_LT(want.size(), plain.size());
  for (int64_t k : {1, 3, 8}) {
    DraftModelDrafter self(*target, {});
    SpeculativeOptions speculative;
    speculative.num_draft = k;
    EXPECT_EQ(generate_speculative(*target, self, prompt, options, speculative).output_ids, want)
        << k;
    for (int64_t max_tokens : {0, 1, 2, 5}) {
      GenerateOptions short_options;
      short_options.max_new_tokens = max_tokens;
      EXPECT_EQ(generate_speculative(*target, self, prompt, short_options, speculative).output_ids,
                std::vector<int32_t>(plain.begin(), plain.begin() + max_tokens));
    }
  }
}

// Sampled tokens with speculation follow the target's joint distribution (tests/speculative/spec_test_support.h).
TEST(SpeculativeSampling, JointDistributionOfTheFirstTokensIsTheTargets) {
  auto target = load_golden("qwen3_5_dense");
  testing::expect_speculative_sampling_follows_target(*target, golden_prompts("qwen3_5_dense")[0], "cpu");
}

// The single-token rule: emitted tokens follow p whatever q is, and acceptance is sum min(p, q).
TEST(SpeculativeSampling, VerifyDraftTokenKeepsTheTargetDistribution) {
  const std::vector<float> p = {0.1f, 0.4f, 0.0f, 0.3f, 0.2f};
  const std::vector<float> q = {0.5f, 0.1f, 0.2f, 0.1f, 0.1f};
  Sampler sampler({1.0f, 0, 1.0f, 5});
  const int64_t samples = 100000;
  for (int point_mass = 0; point_mass < 2; ++point_mass) {
    std::vector<int64_t> counts(p.size(), 0);
    int64_t accepted_count = 0;
    for (int64_t i = 0; i < samples; ++i) {
      const int32_t token = point_mass ? 1 : sampler.draw(q);
      bool accepted = false;
      ++counts[verify_draft_token(sampler, p, point_mass ? nullptr : q.data(), token, &accepted)];
      accepted_count += accepted;
    }
    double statistic = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i] == 0) {
        EXPECT_EQ(counts[i], 0) << "a token the target never samples";
        continue;
      }
      statistic += std::pow(counts[i] - p[i] * samples, 2) / (p[i] * samples);
    }
    EXPECT_LT(statistic, 16.27) << "chi-square, 3 degrees of freedom, p = 0.001";
    double overlap = point_mass ? p[1] : 0.0;
    if (!point_mass)
      for (size_t i = 0; i < p.size(); ++i) overlap += std::min(p[i], q[i]);
    EXPECT_NEAR(double(accepted_count) / samples, overlap, 0.006);  // > 4 standard deviations
  }
}

TEST(SpeculativeSampling, DistributionIsWhatSampleDraws) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 3.0f, -1.0f};
  std::vector<float> probs;
  Sampler greedy({});
  greedy.distribution(logits.data(), 5, probs);
  EXPECT_EQ(probs, (std::vector<float>{0, 0, 0, 1, 0}));
  Sampler top_k({1.0f, 2, 1.0f, 0});
  top_k.distribution(logits.data(), 5, probs);
  EXPECT_NEAR(probs[3], 1 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(probs[0], 1 - 1 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_EQ(probs[1] + probs[2] + probs[4], 0.0f);
  // sample() with the same parameters draws by these probabilities.
  Sampler sampler({1.0f, 2, 1.0f, 3});
  int64_t threes = 0;
  for (int i = 0; i < 20000; ++i) threes += sampler.sample(logits.data(), 5) == 3;
  EXPECT_NEAR(threes / 20000.0, probs[3], 0.013);
}

}  // namespace
}  // namespace vt
