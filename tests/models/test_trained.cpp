// The trained small Qwen3.5 models (real weights, made by scripts/golden/train_small_model.py: the
// dense tests/golden/qwen3_5_trained and its MoE twin tests/golden/qwen3_5_moe_trained) against HF
// transformers float32 on the same bf16 weights (reference.json, scripts/golden/
// make_trained_references.py): greedy ids of held-out prompts, held-out perplexity, and vt's
// tokenizer on the model's own tokenizer.json. Each check runs once per folder.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
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

std::string dir_of(const std::string& folder) { return std::string(VT_SOURCE_DIR) + "/tests/golden/" + folder; }

// The parameter is the folder under tests/golden/. A model is loaded once per folder and kept for
// the folder's three tests (gtest runs a parameterised suite's tests grouped by test, not by
// parameter, so the cache holds both).
class TrainedModel : public ::testing::TestWithParam<std::string> {
 protected:
  struct Loaded {
    std::unique_ptr<Model> model;
    nlohmann::json reference;
  };
  static void TearDownTestSuite() { loaded_.clear(); }
  static Loaded& loaded() {
    auto& slot = loaded_[GetParam()];
    if (!slot.model) {
      slot.model = load_model(dir_of(GetParam()), {});
      slot.reference = read_json_file(dir_of(GetParam()) + "/reference.json");
    }
    return slot;
  }
  Model& model() { return *loaded().model; }
  const nlohmann::json& reference() { return loaded().reference; }

 private:
  static std::map<std::string, Loaded> loaded_;
};
std::map<std::string, TrainedModel::Loaded> TrainedModel::loaded_;

// Every prompt's 24 greedy ids (prefill + cached decode) equal HF's (full forward per step).
TEST_P(TrainedModel, GreedyIdsMatchHf) {
  const auto& prompts = reference()["prompts"];
  ASSERT_GE(prompts.size(), 30u);
  size_t matched = 0;
  for (const auto& prompt : prompts) {
    SCOPED_TRACE(prompt["text"].get<std::string>());
    auto ids = prompt["ids"].get<std::vector<int32_t>>();
    auto want = prompt["greedy_ids"].get<std::vector<int32_t>>();
    GenerateOptions options;
    options.max_new_tokens = int64_t(want.size());
    auto got = generate(model(), ids, options).output_ids;
    EXPECT_EQ(got, want);
    matched += got == want;
  }
  std::printf("%s: %zu / %zu prompts with all greedy ids equal to HF's\n", GetParam().c_str(), matched,
              prompts.size());
}

// Held-out perplexity on HF's ids, windows of 512 tokens: float32 against float32.
TEST_P(TrainedModel, PerplexityMatchesHf) {
  const auto& text = reference()["perplexity"];
  auto ids = text["ids"].get<std::vector<int32_t>>();
  auto result = perplexity(model(), ids, text["context"].get<int64_t>());
  const double want = text["perplexity"].get<double>();
  EXPECT_EQ(result.predicted_tokens, text["predicted_tokens"].get<int64_t>());
  const double relative = result.perplexity / want - 1.0;
  EXPECT_LE(std::abs(relative), numerics::kTrainedPerplexityRelative);
  std::printf("%s: perplexity %.6f vs HF %.6f (relative %.2g) over %lld tokens in %.2f s\n", GetParam().c_str(),
              result.perplexity, want, relative, (long long)result.predicted_tokens, result.seconds);
}

// vt's tokenizer on the model's tokenizer.json gives HF tokenizers' ids for the perplexity text
// and every prompt, and decodes the greedy ids to HF's text.
TEST_P(TrainedModel, TokenizerGivesHfIds) {
  auto tokenizer = Tokenizer::load(dir_of(GetParam()));
  EncodeOptions encode;
  encode.add_special_tokens = false;
  const auto& text = reference()["perplexity"];
  EXPECT_EQ(tokenizer->encode(text["text"].get<std::string>(), encode), text["ids"].get<std::vector<int32_t>>());
  for (const auto& prompt : reference()["prompts"]) {
    const std::string prompt_text = prompt["text"].get<std::string>();
    EXPECT_EQ(tokenizer->encode(prompt_text, encode), prompt["ids"].get<std::vector<int32_t>>()) << prompt_text;
    EXPECT_EQ(tokenizer->decode(prompt["greedy_ids"].get<std::vector<int32_t>>()),
              prompt["greedy_text"].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Folders, TrainedModel, ::testing::Values("qwen3_5_trained", "qwen3_5_moe_trained"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace vt
