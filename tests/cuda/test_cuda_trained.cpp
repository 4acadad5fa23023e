// The trained small Qwen3.5 models (tests/golden/qwen3_5_trained and its MoE twin
// tests/golden/qwen3_5_moe_trained, real weights) on the CUDA model against HF transformers float32
// (reference.json), each test once per folder: the CPU twin of these checks is
// tests/models/test_trained.cpp. f32 activations are held to the CPU reference's bounds (every
// prompt's greedy ids, perplexity within kTrainedPerplexityRelative). bf16 activations (the served
// configuration) are held to a bound set before the first GPU run from the reference's margins:
// a greedy step flips only where HF's top-1/top-2 gap is below the bf16 logits' error (~1% of a
// logit of ~10, so ~0.1), and 10 of the 32 prompts have a step with a gap under 0.012.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../numerics.h"
#include "cuda_test_support.h"
#include "io/json_config.h"
#include "model/generate.h"
#include "model/perplexity.h"
#include "runtime/qwen3_5_cuda.h"

namespace vt {
namespace {

std::string dir_of(const std::string& folder) { return std::string(VT_SOURCE_DIR) + "/tests/golden/" + folder; }

class CudaTrained : public testing::GpuTest, public ::testing::WithParamInterface<std::string> {
 protected:
  std::string dir() const { return dir_of(GetParam()); }

  std::unique_ptr<Qwen35CudaModel> load(DType activations) const {
    CudaModelOptions options;
    options.activations = activations;
    options.tune_gemms = false;  // the built-in rule: no timing decides what the test checks
    options.max_context = 1024;
    options.max_step_tokens = 512;  // a whole perplexity window in one step, all its logits
    options.max_logit_rows = 512;
    return load_qwen35_cuda(dir(), options);
  }

  struct Greedy {
    size_t equal = 0, total = 0, first_token_equal = 0;
  };

  static Greedy greedy(Model& model, const nlohmann::json& reference, bool expect_each) {
    Greedy result;
    for (const auto& prompt : reference["prompts"]) {
      auto ids = prompt["ids"].get<std::vector<int32_t>>();
      auto want = prompt["greedy_ids"].get<std::vector<int32_t>>();
      GenerateOptions options;
      options.max_new_tokens = int64_t(want.size());
      auto got = generate(model, ids, options).output_ids;
      if (expect_each) {
        EXPECT_EQ(got, want) << prompt["text"].get<std::string>();
      }
      result.equal += got == want;
      result.first_token_equal += !got.empty() && got[0] == want[0];
      ++result.total;
    }
    return result;
  }
};

TEST_P(CudaTrained, F32GreedyAndPerplexityMatchHf) {
  const auto reference = read_json_file(dir() + "/reference.json");
  ASSERT_GE(reference["prompts"].size(), 30u);
  auto model = load(DType::kF32);
  const auto result = greedy(*model, reference, /*expect_each=*/true);
  std::printf("cuda %s f32: %zu / %zu prompts with all 24 greedy ids equal to HF's\n", GetParam().c_str(),
              result.equal, result.total);

  const auto& text = reference["perplexity"];
  auto ids = text["ids"].get<std::vector<int32_t>>();
  auto measured = perplexity(*model, ids, text["context"].get<int64_t>());
  const double want = text["perplexity"].get<double>();
  EXPECT_EQ(measured.predicted_tokens, text["predicted_tokens"].get<int64_t>());
  EXPECT_LE(std::abs(measured.perplexity / want - 1.0), numerics::kTrainedPerplexityRelative);
  std::printf("cuda %s f32: perplexity %.6f vs HF %.6f (relative %.2g)\n", GetParam().c_str(),
              measured.perplexity, want, measured.perplexity / want - 1.0);
}

TEST_P(CudaTrained, Bf16ActivationsWithinTheMarginBound) {
  const auto reference = read_json_file(dir() + "/reference.json");
  size_t robust = 0;  // prompts whose every greedy step has a gap above bf16's logit error
  for (const auto& prompt : reference["prompts"]) robust += prompt["min_margin"].get<double>() > 0.1;
  auto model = load(DType::kBF16);
  const auto result = greedy(*model, reference, /*expect_each=*/false);
  EXPECT_GE(result.equal, robust);

  const auto& text = reference["perplexity"];
  auto ids = text["ids"].get<std::vector<int32_t>>();
  auto measured = perplexity(*model, ids, text["context"].get<int64_t>());
  const double relative = measured.perplexity / text["perplexity"].get<double>() - 1.0;
  EXPECT_LE(std::abs(relative), numerics::kTrainedBf16PerplexityRelative);
  std::printf("cuda %s bf16 activations: %zu / %zu prompts all greedy ids equal (%zu robust), "
              "first token %zu / %zu; perplexity %.6f (relative %.2g)\n",
              GetParam().c_str(), result.equal, result.total, robust, result.first_token_equal, result.total, measured.perplexity,
              relative);
}

INSTANTIATE_TEST_SUITE_P(Folders, CudaTrained, ::testing::Values("qwen3_5_trained", "qwen3_5_moe_trained"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace vt
