// Structured output's token rule (xgrammar) on SmolLM2's vocabulary: a schema's valid JSON passes
// token by token and a finished grammar allows only the stop tokens; wrong tokens are masked;
// reasoning stays free until `</think>`; rollback restores the state (speculative drafts); forced
// tool calls in both formats parse back through the output parser; schemas xgrammar cannot
// compile are 400s. Prints the mask's cost per step. Skipped unless SmolLM2 is fetched.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "io/gguf.h"
#include "server/grammar.h"
#include "server/validation.h"
#include "tokenizer/gguf_tokenizer.h"

namespace vt::server {
namespace {

using Json = nlohmann::json;

const std::string kModel = std::string(VT_SOURCE_DIR) + "/.cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

struct Fixture {
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> stop_ids;
  std::unique_ptr<StructuredOutput> structured;
  int64_t vocab = 0;
};

Fixture* fixture() {
  static Fixture* shared = [] {
    auto* made = new Fixture;
    GgufFile file(kModel);
    made->tokenizer = load_gguf_tokenizer(file);
    made->stop_ids = gguf_special_tokens(file).stop_ids();
    made->vocab = made->tokenizer->vocab_size();
    made->structured = std::make_unique<StructuredOutput>(*made->tokenizer, made->vocab, made->stop_ids);
    return made;
  }();
  return shared;
}

#define REQUIRE_SMOLLM2()                                                                                   \
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << kModel << " is not fetched (scripts/fetch-smollm2.sh)"

ChatOptions schema_options(const std::string& schema) {
  ChatOptions options;
  options.response_format = ResponseFormat::kJsonSchema;
  options.json_schema = nlohmann::ordered_json::parse(schema);
  return options;
}

// Feeds `text`'s tokens through the rule: each must be allowed (finite after the mask). Returns
// the mask's mean cost per token in microseconds.
double walk(TokenConstraint& rule, const std::string& text, int64_t vocab, const Tokenizer* tokenizer = nullptr) {
  if (!tokenizer) tokenizer = fixture()->tokenizer.get();
  std::vector<float> logits(static_cast<size_t>(vocab));
  EncodeOptions plain;
  plain.add_special_tokens = false;
  double seconds = 0;
  const std::vector<int32_t> ids = tokenizer->encode(text, plain);
  for (int32_t id : ids) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    const auto start = std::chrono::steady_clock::now();
    rule.mask(logits.data(), vocab);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(std::isfinite(logits[size_t(id)])) << "token '" << tokenizer->decode({id}) << "' of " << text;
    EXPECT_TRUE(rule.accept(id));
  }
  return seconds * 1e6 / double(ids.size());
}

// The tokens the rule allows now.
std::vector<int32_t> allowed(TokenConstraint& rule, int64_t vocab) {
  std::vector<float> logits(size_t(vocab), 0.0f);
  rule.mask(logits.data(), vocab);
  std::vector<int32_t> ids;
  for (int64_t id = 0; id < vocab; ++id)
    if (std::isfinite(logits[size_t(id)])) ids.push_back(int32_t(id));
  return ids;
}

const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string"}, "kind": {"enum": ["cat", "dog"]},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
    "size": {"type": "number"}, "owner": {"type": "object", "properties": {"age": {"type": "integer"}},
    "required": ["age"]}}, "required": ["name", "kind", "tags", "size", "owner"]})";

TEST(StructuredOutput, SchemaWalkThenOnlyStopTokens) {
  REQUIRE_SMOLLM2();
  Fixture& f = *fixture();
  auto rule = f.structured->constraint_for(schema_options(kSchema), OutputParserOptions{})();
  const double micros =
      walk(*rule, R"({"name": "Rex", "kind": "dog", "tags": ["a", "b"], "size": 3.5, "owner": {"age": 7}})", f.vocab);
  std::vector<int32_t> stops = f.stop_ids;
  std::sort(stops.begin(), stops.end());
  EXPECT_EQ(allowed(*rule, f.vocab), stops);
  // The baseline: one greedy pick over the same logits (the least a sampling step does).
  std::vector<float> logits(static_cast<size_t>(f.vocab), 0.5f);
  logits[123] = 1.0f;
  const auto start = std::chrono::steady_clock::now();
  int64_t picked = 0;
  for (int repeat = 0; repeat < 100; ++repeat)
    picked += std::max_element(logits.begin(), logits.end()) - logits.begin();
  const double argmax_micros =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * 1e6 / 100;
  EXPECT_EQ(picked, 12300);
  std::printf("json_schema mask: %.1f us per step over a %lld-token vocabulary (argmax over it: %.1f us)\n", micros,
              (long long)f.vocab, argmax_micros);
}

TEST(StructuredOutput, WrongTokensAreMasked) {
  REQUIRE_SMOLLM2();
  Fixture& f = *fixture();
  auto rule = f.structured->constraint_for(schema_options(kSchema), OutputParserOptions{})();
  EncodeOptions plain;
  plain.add_special_tokens = false;
  std::vector<float> logits(size_t(f.vocab), 0.0f);
  rule->mask(logits.data(), f.vocab);
  const int32_t letter = f.tokenizer->encode("x", plain).front();
  EXPECT_FALSE(std::isfinite(logits[size_t(letter)]));  // JSON must open with '{'
  EXPECT_FALSE(rule->accept(letter));
  walk(*rule, R"({"name": "a", "kind": ")", f.vocab);
  const std::vector<int32_t> next = allowed(*rule, f.vocab);
  EXPECT_FALSE(next.empty());
  for (int32_t id : next) {  // the enum: only prefixes of cat" / dog"
    const std::string text = f.tokenizer->decode({id});
    EXPECT_TRUE(std::string("cat\"").starts_with(text) || std::string("dog\"").starts_with(text)) << text;
  }
}

TEST(StructuredOutput, JsonObjectIsAnObject) {
  REQUIRE_SMOLLM2();
  Fixture& f = *fixture();
  ChatOptions options;
  options.response_format = ResponseFormat::kJsonObject;
  auto rule = f.structured->constraint_for(options, OutputParserOptions{})();
  EncodeOptions plain;
  plain.add_special_tokens = false;
  std::vector<float> logits(size_t(f.vocab), 0.0f);
  rule->mask(logits.data(), f.vocab);
  EXPECT_FALSE(std::isfinite(logits[size_t(f.tokenizer->encode("[", plain).front())]));
  walk(*rule, R"({"any": [1, {"x": null}], "b": true})", f.vocab);
}

TEST(StructuredOutput, ReasoningIsFreeUntilThinkEnds) {
  REQUIRE_SMOLLM2();
  Fixture& f = *fixture();
  OutputParserOptions reasoning;
  reasoning.reasoning = true;
  auto rule = f.structured->constraint_for(schema_options(R"({"type": "object", "properties": {"a": {"type": "integer"}},
      "required": ["a"]})"), reasoning)();
  EXPECT_EQ(int64_t(allowed(*rule, f.vocab).size()), f.vocab);  // free: any token
  walk(*rule, "Let me think [not JSON] <b>.\n", f.vocab);
  EXPECT_EQ(int64_t(allowed(*rule, f.vocab).size()), f.vocab);
  walk(*rule, "</think>", f.vocab);
  EXPECT_LT(allowed(*rule, f.vocab).size(), 100u);  // the grammar now
  // Rollback (rejected drafts) across the end of reasoning frees it again, and replays alike.
  EncodeOptions plain;
  plain.add_special_tokens = false;
  const int count = int(f.tokenizer->encode("</think>", plain).size());
  rule->rollback(count);
  EXPECT_EQ(int64_t(allowed(*rule, f.vocab).size()), f.vocab);
  walk(*rule, "</think>{\"a\": 12}", f.vocab);
  std::vector<int32_t> stops = f.stop_ids;
  std::sort(stops.begin(), stops.end());
  EXPECT_EQ(allowed(*rule, f.vocab), stops);
}

const char* kTools = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "list_files"}}])";

ChatOptions tool_options(ToolChoice choice, bool parallel) {
  ChatOptions options;
  options.tools = nlohmann::ordered_json::parse(kTools);
  options.tool_choice = choice;
  options.tool_name = "get_weather";
  options.parallel_tool_calls = parallel;
  return options;
}

// A forced call, written in the model's format, passes the rule token by token; then only stop
// tokens; and the output parser reads it back with typed arguments.
void expect_forced_call(ToolCallFormat format, const ChatOptions& options, const std::string& call) {
  Fixture& f = *fixture();
  OutputParserOptions output;
  output.format = format;
  output.tools = nlohmann::json::parse(kTools);
  auto rule = f.structured->constraint_for(options, output)();
  walk(*rule, call, f.vocab);
  std::vector<int32_t> stops = f.stop_ids;
  std::sort(stops.begin(), stops.end());
  EXPECT_EQ(allowed(*rule, f.vocab), stops) << call;
  const ParsedOutput parsed = parse_output(output, call);
  ASSERT_EQ(parsed.tool_calls.size(), 1u) << call;
  EXPECT_EQ(parsed.tool_calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(parsed.tool_calls[0].arguments), (Json{{"city", "Paris"}, {"days", 3}}));
}

TEST(StructuredOutput, ForcedToolCallsInBothFormats) {
  REQUIRE_SMOLLM2();
  const std::string xml = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                          "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
  const std::string hermes = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>";
  expect_forced_call(ToolCallFormat::kQwen3Coder, tool_options(ToolChoice::kNamed, true), xml);
  expect_forced_call(ToolCallFormat::kHermes, tool_options(ToolChoice::kNamed, true), hermes);
  expect_forced_call(ToolCallFormat::kQwen3Coder, tool_options(ToolChoice::kRequired, false), xml);
  // Named: another function is refused at its name.
  Fixture& f = *fixture();
  OutputParserOptions output;
  output.format = ToolCallFormat::kHermes;
  auto rule = f.structured->constraint_for(tool_options(ToolChoice::kNamed, true), output)();
  EXPECT_EQ(allowed(*rule, f.vocab).size(), 1u);  // the fixed text leaves one token at a time
  // Required, parallel: a second call may follow the first.
  auto parallel = f.structured->constraint_for(tool_options(ToolChoice::kRequired, true), output)();
  walk(*parallel, hermes + "\n<tool_call>\n{\"name\": \"list_files\", \"arguments\": {}}\n</tool_call>", f.vocab);
}

// The family's own vocabulary (make tokenizers): `</think>` is one added token there; the mask's
// cost per step at that size. Skipped unless .cache/tokenizers/qwen3_5 is fetched.
TEST(StructuredOutput, QwenVocabularyThinkGateAndCost) {
  const std::string folder = std::string(VT_SOURCE_DIR) + "/.cache/tokenizers/qwen3_5";
  if (!std::filesystem::exists(folder + "/tokenizer.json")) GTEST_SKIP() << "run scripts/fetch-tokenizers.sh";
  const auto tokenizer = Tokenizer::load(folder);
  std::vector<int32_t> stops;
  for (const char* name : {"<|im_end|>", "<|endoftext|>"})
    if (tokenizer->token_to_id(name) >= 0) stops.push_back(tokenizer->token_to_id(name));
  ASSERT_FALSE(stops.empty());
  const int64_t vocab = tokenizer->vocab_size();
  StructuredOutput structured(*tokenizer, vocab, stops);
  OutputParserOptions reasoning;
  reasoning.reasoning = true;
  auto rule = structured.constraint_for(schema_options(kSchema), reasoning)();
  EncodeOptions plain;
  plain.add_special_tokens = false;
  EXPECT_EQ(tokenizer->encode("</think>", plain).size(), 1u);
  walk(*rule, "The user wants a pet.\n</think>\n\n", vocab, tokenizer.get());
  const double micros = walk(
      *rule, R"({"name": "Rex", "kind": "dog", "tags": ["a", "b"], "size": 3.5, "owner": {"age": 7}})", vocab, tokenizer.get());
  std::vector<float> logits(static_cast<size_t>(vocab), 0.0f);
  rule->mask(logits.data(), vocab);
  int64_t open = 0;
  for (float value : logits) open += std::isfinite(value);
  EXPECT_EQ(open, int64_t(stops.size()));
  std::printf("json_schema mask: %.1f us per step over a %lld-token vocabulary\n", micros, (long long)vocab);
}

TEST(StructuredOutput, BadSchemasAre400s) {
  REQUIRE_SMOLLM2();
  for (const char* schema : {R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}})",
                             R"({"type": "integer", "minimum": 5, "maximum": 1})"}) {
    try {
      fixture()->structured->constraint_for(schema_options(schema), OutputParserOptions{});
      ADD_FAILURE() << "compiled: " << schema;
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status, 400);
      EXPECT_EQ(error.param, "response_format.json_schema.schema");
    }
  }
}

}  // namespace
}  // namespace vt::server
