// Golden tests: the CPU reference against HF transformers (float32) on tiny random checkpoints
// made by scripts/golden/make_goldens.py. Logits at every prompt position and 24 greedy tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../numerics.h"
#include "io/json_config.h"
#include "model/generate.h"
#include "models/registry.h"

namespace vt {
namespace {

const std::string kGoldenDir = std::string(VT_SOURCE_DIR) + "/tests/golden/";

struct GoldenPrompt {
  std::vector<int32_t> ids;
  std::vector<int32_t> greedy_ids;
  std::vector<float> logits;  // [len, vocab]
};

std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(in) << path;
  std::vector<float> values(size_t(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(values.data()), std::streamsize(values.size() * sizeof(float)));
  return values;
}

std::vector<GoldenPrompt> read_prompts(const std::string& dir, const nlohmann::json& prompts) {
  std::vector<GoldenPrompt> out;
  for (const auto& prompt : prompts) {
    GoldenPrompt golden;
    golden.ids = prompt["ids"].get<std::vector<int32_t>>();
    golden.greedy_ids = prompt["greedy_ids"].get<std::vector<int32_t>>();
    golden.logits = read_f32(dir + "/" + prompt["logits_file"].get<std::string>());
    out.push_back(std::move(golden));
  }
  return out;
}

double relative_l2(const float* a, const float* b, size_t count) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < count; ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

// Prompt logits at every position, one prefill.
std::vector<float> prompt_logits(Model& model, const std::vector<int32_t>& ids,
                                 DeltaRuleChoice delta_rule = DeltaRuleChoice::kAuto) {
  const int64_t vocab = model.info().vocab_size, len = int64_t(ids.size());
  auto state = model.new_sequence(len);
  Buffer logits(DType::kF32, {len, vocab});
  ForwardOptions options;
  options.all_logits = true;
  options.delta_rule = delta_rule;
  model.forward(ids, *state, logits, options);
  return {logits.f32(), logits.f32() + len * vocab};
}

std::vector<int32_t> greedy(Model& model, const std::vector<int32_t>& ids, int64_t count) {
  GenerateOptions options;
  options.max_new_tokens = count;
  return generate(model, ids, options).output_ids;
}

void check_case(const std::string& name, const std::string& mode, Fp8Activations activations,
                double tolerance) {
  const std::string dir = kGoldenDir + name;
  nlohmann::json reference = read_json_file(dir + "/reference.json");
  const nlohmann::json& prompts =
      mode.empty() ? reference["prompts"] : reference["modes"][mode]["prompts"];
  LoadOptions load_options;
  load_options.fp8_activations = activations;
  auto model = load_model(dir, load_options);
  auto goldens = read_prompts(dir, prompts);
  for (size_t p = 0; p < goldens.size(); ++p) {
    const GoldenPrompt& golden = goldens[p];
    SCOPED_TRACE(name + " " + mode + " prompt of " + std::to_string(golden.ids.size()) + " tokens");
    std::vector<float> logits = prompt_logits(*model, golden.ids);
    ASSERT_EQ(logits.size(), golden.logits.size());
    double error = relative_l2(logits.data(), golden.logits.data(), logits.size());
    EXPECT_LE(error, tolerance);
    std::printf("%s %s prompt %zu: logits rel L2 %.3g\n", name.c_str(), mode.c_str(), golden.ids.size(), error);
    // Where the reference's own float32-vs-float64 run parts ways (W8A8 only), greedy ids are
    // compared up to that step: beyond it the reference itself is not determined.
    size_t compared = golden.greedy_ids.size();
    const auto& floor = reference["noise_floor"][mode];
    if (floor.is_object() && floor["prompt_index"] == p && floor["first_greedy_diff"].is_number())
      compared = floor["first_greedy_diff"].get<size_t>();
    auto ids = greedy(*model, golden.ids, int64_t(golden.greedy_ids.size()));
    EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + compared),
              std::vector<int32_t>(golden.greedy_ids.begin(), golden.greedy_ids.begin() + compared));
  }
}

TEST(Golden, Qwen35Dense) { check_case("qwen3_5_dense", "", Fp8Activations::kQuantized, numerics::kLogitsRelL2); }
// YaRN from rope_parameters (factor 4 over 32 original positions; the 150-token prompt runs past them).
TEST(Golden, Qwen35Yarn) { check_case("qwen3_5_yarn", "", Fp8Activations::kQuantized, numerics::kLogitsRelL2); }
TEST(Golden, Qwen35VisionLanguageLayout) { check_case("qwen3_5_vl", "", Fp8Activations::kQuantized, numerics::kLogitsRelL2); }
TEST(Golden, Qwen35Moe) { check_case("qwen3_5_moe", "", Fp8Activations::kQuantized, numerics::kLogitsRelL2); }
TEST(Golden, Qwen3NextSharded) { check_case("qwen3_next", "", Fp8Activations::kQuantized, numerics::kLogitsRelL2); }
TEST(Golden, Qwen35Fp8WeightOnly) {
  check_case("qwen3_5_fp8", "weight_only", Fp8Activations::kFloat, numerics::kFp8WeightOnlyRelL2);
}
TEST(Golden, Qwen35Fp8W8A8) {
  check_case("qwen3_5_fp8", "w8a8", Fp8Activations::kQuantized, numerics::kFp8W8A8RelL2);
}

// Chunked prefill and the token-by-token recurrence must agree through the whole model.
TEST(Golden, ChunkedEqualsRecurrentThroughTheModel) {
  for (const char* name : {"qwen3_5_dense", "qwen3_next"}) {
    auto model = load_model(kGoldenDir + name, {});
    nlohmann::json reference = read_json_file(kGoldenDir + name + "/reference.json");
    auto ids = reference["prompts"][1]["ids"].get<std::vector<int32_t>>();
    auto chunked = prompt_logits(*model, ids, DeltaRuleChoice::kChunked);
    auto recurrent = prompt_logits(*model, ids, DeltaRuleChoice::kRecurrent);
    EXPECT_LE(relative_l2(chunked.data(), recurrent.data(), chunked.size()), numerics::kSamePathRelL2) << name;
  }
}

// The FP8 output layer (`vt eval drift`, `--lm-head fp8`) moves the logits by less than the W8A8
// bound and does move them; so does it weight-only (`vt eval drift --fp8-activations float`, the
// CPU reference), with other logits than W8A8 (the activations' rounding is the difference), and
// with exact columns (`--fp8-exact-columns`).
TEST(Golden, Fp8OutputLayerWithinBound) {
  for (const char* name : {"qwen3_5_dense", "qwen3_5_moe"}) {
    nlohmann::json reference = read_json_file(kGoldenDir + name + "/reference.json");
    auto ids = reference["prompts"][1]["ids"].get<std::vector<int32_t>>();
    auto model = load_model(kGoldenDir + name, {});
    auto stored = prompt_logits(*model, ids, DeltaRuleChoice::kAuto);
    model->quantize_lm_head_fp8();
    auto fp8 = prompt_logits(*model, ids, DeltaRuleChoice::kAuto);
    const double error = relative_l2(fp8.data(), stored.data(), stored.size());
    EXPECT_GT(error, 0.0) << name;
    EXPECT_LE(error, numerics::kFp8W8A8RelL2) << name;
    EXPECT_THROW(model->quantize_lm_head_fp8(), Error) << name << ": quantising twice";

    auto weight_only_model = load_model(kGoldenDir + name, {});
    weight_only_model->quantize_lm_head_fp8({Fp8Activations::kFloat, 128});
    auto weight_only = prompt_logits(*weight_only_model, ids, DeltaRuleChoice::kAuto);
    const double weight_only_error = relative_l2(weight_only.data(), stored.data(), stored.size());
    EXPECT_GT(weight_only_error, 0.0) << name;
    EXPECT_LE(weight_only_error, numerics::kFp8W8A8RelL2) << name;
    EXPECT_NE(weight_only, fp8) << name << ": weight-only ran W8A8";

    // With the 8 largest-norm input columns kept out of FP8: also within the bound, other logits.
    auto exact_model = load_model(kGoldenDir + name, {});
    exact_model->quantize_lm_head_fp8({Fp8Activations::kQuantized, 128, 128, 8});
    auto exact = prompt_logits(*exact_model, ids, DeltaRuleChoice::kAuto);
    EXPECT_LE(relative_l2(exact.data(), stored.data(), stored.size()), numerics::kFp8W8A8RelL2) << name;
    EXPECT_NE(exact, fp8) << name << ": the exact columns changed nothing";
  }
}

// Prefill of a prefix, then the rest one token at a time, equals one prefill of everything.
TEST(Golden, PrefillThenDecodeEqualsOnePrefill) {
  for (const char* name : {"qwen3_5_dense", "qwen3_5_moe", "qwen3_next"}) {
    auto model = load_model(kGoldenDir + name, {});
    nlohmann::json reference = read_json_file(kGoldenDir + name + "/reference.json");
    auto ids = reference["prompts"][1]["ids"].get<std::vector<int32_t>>();
    const int64_t len = int64_t(ids.size()), vocab = model->info().vocab_size, split = 100;
    auto whole = prompt_logits(*model, ids);

    auto state = model->new_sequence(len);
    Buffer logits(DType::kF32, {split, vocab});
    ForwardOptions all;
    all.all_logits = true;
    model->forward(std::span<const int32_t>(ids.data(), split), *state, logits, all);
    double worst = relative_l2(logits.f32(), whole.data(), split * vocab);
    Buffer step_logits(DType::kF32, {1, vocab});
    for (int64_t t = split; t < len; ++t) {
      model->forward(std::span<const int32_t>(&ids[t], 1), *state, step_logits, {});
      worst = std::max(worst, relative_l2(step_logits.f32(), whole.data() + t * vocab, vocab));
    }
    EXPECT_LE(worst, numerics::kSamePathRelL2) << name;
    std::printf("%s: prefill %lld + decode %lld vs one prefill: worst rel L2 %.3g\n", name,
                (long long)split, (long long)(len - split), worst);
  }
}

}  // namespace
}  // namespace vt
