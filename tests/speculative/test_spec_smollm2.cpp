// Speculative decoding on a real model: SmolLM2-135M-Instruct asked to copy a paragraph, the
// workload prompt lookup is for. Greedy n-gram speculation gives the plain greedy ids and takes
// several tokens per step. Skipped when the model is not fetched (make test fetches it), unless
// VT_REQUIRE_SMOLLM2=1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "model/generate.h"
#include "models/registry.h"
#include "speculative/ngram_drafter.h"
#include "speculative/speculative.h"
#include "tokenizer/gguf_tokenizer.h"

namespace vt {
namespace {

const std::string kModel =
    std::string(VT_SOURCE_DIR) + "/.cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

// The edit-like prompt of docs/perf/2026-11-29-spec-ngram-cpu.md (there with 128 new tokens).
const char* const kCopyPrompt =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n"
    "<|im_start|>user\nCopy the following text, word for word.\n\n"
    "If you do much work on computers, eventualy you find that there's some task you'd like to "
    "automate. "
    "For example, you may wish to perform a search-and-replace over a large number of text files, "
    "or rename "
    "and rearange a bunch of photo files in a complicated way. Perhaps you'd like to write a small "
    "custom "
    "database, or a specialized GUI aplication, or a simple "
    "game.<|im_end|>\n<|im_start|>assistant\n";

TEST(SpeculativeSmolLM2, NgramOnACopyTaskIsLosslessAndAcceptsMost) {
  if (!std::filesystem::exists(kModel)) {
    const char* required = std::getenv("VT_REQUIRE_SMOLLM2");
    if (required && std::string(required) == "1")
      FAIL() << kModel << " is missing; run scripts/fetch-smollm2.sh";
    GTEST_SKIP() << kModel << " is not fetched (scripts/fetch-smollm2.sh)";
  }
  auto model = load_model(kModel, {});
  const auto tokenizer = load_gguf_tokenizer(GgufFile(kModel));
  const std::vector<int32_t> prompt = tokenizer->encode(kCopyPrompt);
  GenerateOptions options;
  options.max_new_tokens = 48;
  const auto plain = generate(*model, prompt, options);
  NgramDrafter drafter;
  SpeculativeOptions speculative;
  speculative.num_draft = 4;
  const auto result = generate_speculative(*model, drafter, prompt, options, speculative);
  EXPECT_EQ(result.output_ids, plain.output_ids);
  std::printf("%s\n%.2f tokens per step, %lld of %lld drafts accepted\n",
              tokenizer->decode(result.output_ids).c_str(), result.stats.tokens_per_step(),
              (long long)result.stats.accepted, (long long)result.stats.drafted);
  EXPECT_GT(result.stats.tokens_per_step(), 2.5);  // copying: most drafts are right
}

}  // namespace
}  // namespace vt
