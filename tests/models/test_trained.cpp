// The trained small Qwen3.5 model (tests/golden/qwen3_5_trained: real weights, made by
// scripts/golden/train_small_model.py) against HF transformers float32 on the same bf16 weights
// (reference.json, scripts/golden/make_trained_references.py): greedy ids of held-out prompts,
// held-out perplexity, and vt's tokenizer on the model's own tokenizer.json.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../numerics.h"
#include "io/json_config.h"
#include "model/generate.h"
#include "model/perplexity.h"
#include "models/registry.h"
#include "tokenizer/tokenizer.h"

namespace vt {
namespace {

const std::string kDir = std::string(VT_SOURCE_DIR) + "/tests/golden/qwen3_5_trained";

class TrainedModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = load_model(kDir, {}).release();
    reference_ = new nlohmann::json(read_json_file(kDir + "/reference.json"));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete reference_;
    model_ = nullptr;
    reference_ = nullptr;
  }
  static Model* model_;
  static nlohmann::json* reference_;
};
Model* TrainedModel::model_ = nullptr;
nlohmann::json* TrainedModel::reference_ = nullptr;

// Every prompt's 24 greedy ids (prefill + cached decode) equal HF's (full forward per step).
TEST_F(TrainedModel, GreedyIdsMatchHf) {
  const auto& prompts = (*reference_)["prompts"];
  ASSERT_GE(prompts.size(), 30u);
  size_t matched = 0;
  for (const auto& prompt : prompts) {
    SCOPED_TRACE(prompt["text"].get<std::string>());
    auto ids = prompt["ids"].get<std::vector<int32_t>>();
    auto want = prompt["greedy_ids"].get<std::vector<int32_t>>();
    GenerateOptions options;
    options.max_new_tokens = int64_t(want.size());
    auto got = generate(*model_, ids, options).output_ids;
    EXPECT_EQ(got, want);
    matched += got == want;
  }
  std::printf("trained model: %zu / %zu prompts with all greedy ids equal to HF's\n", matched, prompts.size());
}

// Held-out perplexity on HF's ids, windows of 512 tokens: float32 against float32.
TEST_F(TrainedModel, PerplexityMatchesHf) {
  const auto& reference = (*reference_)["perplexity"];
  auto ids = reference["ids"].get<std::vector<int32_t>>();
  auto result = perplexity(*model_, ids, reference["context"].get<int64_t>());
  const double want = reference["perplexity"].get<double>();
  EXPECT_EQ(result.predicted_tokens, reference["predicted_tokens"].get<int64_t>());
  const double relative = result.perplexity / want - 1.0;
  EXPECT_LE(std::abs(relative), numerics::kTrainedPerplexityRelative);
  std::printf("trained model: perplexity %.6f vs HF %.6f (relative %.2g) over %lld tokens in %.2f s\n",
              result.perplexity, want, relative, (long long)result.predicted_tokens, result.seconds);
}

// vt's tokenizer on the model's tokenizer.json gives HF tokenizers' ids for the perplexity text
// and every prompt, and decodes the greedy ids to HF's text.
TEST_F(TrainedModel, TokenizerGivesHfIds) {
  auto tokenizer = Tokenizer::load(kDir);
  EncodeOptions encode;
  encode.add_special_tokens = false;
  const auto& text = (*reference_)["perplexity"];
  EXPECT_EQ(tokenizer->encode(text["text"].get<std::string>(), encode), text["ids"].get<std::vector<int32_t>>());
  for (const auto& prompt : (*reference_)["prompts"]) {
    const std::string prompt_text = prompt["text"].get<std::string>();
    EXPECT_EQ(tokenizer->encode(prompt_text, encode), prompt["ids"].get<std::vector<int32_t>>()) << prompt_text;
    EXPECT_EQ(tokenizer->decode(prompt["greedy_ids"].get<std::vector<int32_t>>()),
              prompt["greedy_text"].get<std::string>());
  }
}

}  // namespace
}  // namespace vt
