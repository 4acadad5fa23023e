// Request validation at the server's edge: each bad field gives a 4xx naming it; good bodies parse.
#include <gtest/gtest.h>

#include "server/validation.h"

namespace vt::server {
namespace {

ValidationLimits limits() {
  ValidationLimits result;
  result.model_name = "tiny";
  result.vocab_size = 100;
  result.max_total_tokens = 64;
  return result;
}

// The status and param of the ApiError a body raises (0, "" when it parses).
std::pair<int, std::string> outcome(const std::string& body, bool chat = false) {
  try {
    parse_completion_request(body, chat, limits());
  } catch (const ApiError& error) {
    return {error.status, error.param};
  }
  return {0, ""};
}

TEST(ServerValidation, GoodBodiesParse) {
  auto request = parse_completion_request(
      R"({"model": "tiny", "prompt": "hi", "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "top_k": -1,
          "seed": 7, "stop": ["a", "b"], "stream": true, "stream_options": {"include_usage": true}, "n": 1,
          "logprobs": null, "user": "x"})",
      false, limits());
  ASSERT_EQ(request.prompts.size(), 1u);
  EXPECT_EQ(request.prompts[0].text, "hi");
  EXPECT_EQ(request.max_tokens, 5);
  EXPECT_FLOAT_EQ(request.sampling.temperature, 0.5f);
  EXPECT_EQ(request.sampling.top_k, 0);
  EXPECT_EQ(request.sampling.seed, 7u);
  EXPECT_TRUE(request.seeded && request.stream && request.include_usage);
  EXPECT_FALSE(request.continuous_usage);
  // vLLM's continuous_usage_stats: usage in every chunk, only beside include_usage.
  const std::string streamed = R"({"prompt": "hi", "stream": true, "stream_options": )";
  EXPECT_TRUE(parse_completion_request(streamed + R"({"include_usage": true, "continuous_usage_stats": true}})", false,
                                       limits()).continuous_usage);
  EXPECT_FALSE(parse_completion_request(streamed + R"({"continuous_usage_stats": true}})", false, limits()).continuous_usage);
  EXPECT_EQ(request.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(request.penalties.any());
  // OpenAI's presence and frequency penalties and vLLM's repetition penalty reach the engine.
  request = parse_completion_request(
      R"({"prompt": "hi", "presence_penalty": 1.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1})", false,
      limits());
  EXPECT_FLOAT_EQ(request.penalties.presence, 1.5f);
  EXPECT_FLOAT_EQ(request.penalties.frequency, -0.5f);
  EXPECT_FLOAT_EQ(request.penalties.repetition, 1.1f);
  EXPECT_FLOAT_EQ(parse_completion_request(R"({"prompt": "hi", "min_p": 0.1})", false, limits()).sampling.min_p, 0.1f);

  request = parse_completion_request(R"({"prompt": [[1, 2, 3]]})", false, limits());
  ASSERT_EQ(request.prompts.size(), 1u);
  EXPECT_EQ(request.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));

  request = parse_completion_request(
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "u"}]},
                       {"role": "assistant", "content": null}, {"role": "developer", "content": "d"}]})",
      true, limits());
  ASSERT_EQ(request.messages.size(), 4u);
  EXPECT_EQ(request.messages[1]["content"], "u");
  EXPECT_EQ(request.messages[3]["role"], "system");
}

// Text parts of one message are joined a line apart, as vLLM and llama.cpp join them (Continue and
// the Agents SDK send a user turn as several parts: glued, "x = 1" ran into "Explain it").
TEST(ServerValidation, TextPartsJoinedOneALine) {
  auto request = parse_completion_request(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "x = 1"},
                                                     {"type": "text", "text": "Explain it"},
                                                     {"type": "text", "text": ""}]}]})",
      true, limits());
  EXPECT_EQ(request.messages[0]["content"], "x = 1\nExplain it\n");
  request = parse_completion_request(R"({"messages": [{"role": "user", "content": []}]})", true, limits());
  EXPECT_EQ(request.messages[0]["content"], "");
}

// A list of prompts is a batch, as vLLM and OpenAI take it (LangChain's OpenAI LLM sends its
// batch so): texts or token-id lists, each checked as one prompt is.
TEST(ServerValidation, PromptBatches) {
  auto request = parse_completion_request(R"({"prompt": ["a", "b c", "d"], "n": 2})", false, limits());
  ASSERT_EQ(request.prompts.size(), 3u);
  EXPECT_EQ(request.prompts[1].text, "b c");
  EXPECT_TRUE(request.prompts[1].ids.empty());
  request = parse_completion_request(R"({"prompt": [[1, 2], [3]]})", false, limits());
  ASSERT_EQ(request.prompts.size(), 2u);
  EXPECT_EQ(request.prompts[0].ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(request.prompts[1].ids, (std::vector<int32_t>{3}));
  request = parse_completion_request(R"({"prompt": [4, 5]})", false, limits());  // one prompt of ids
  ASSERT_EQ(request.prompts.size(), 1u);
  EXPECT_EQ(request.prompts[0].ids, (std::vector<int32_t>{4, 5}));
  ValidationLimits two = limits();
  two.max_prompts = 2;
  EXPECT_NO_THROW(parse_completion_request(R"({"prompt": ["a", "b"]})", false, two));
  try {
    parse_completion_request(R"({"prompt": ["a", "b", "c"]})", false, two);
    FAIL() << "a batch over the limit accepted";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.status, 400);
    EXPECT_EQ(error.param, "prompt");
  }
}

// vt serve --generation-config auto hands the model's sampling defaults over: fields a request
// sets win, the others keep the defaults.
TEST(ServerValidation, DefaultSamplingFillsWhatTheRequestLeavesOut) {
  ValidationLimits with_defaults = limits();
  with_defaults.default_sampling = {.temperature = 0.6f, .top_k = 20, .top_p = 0.95f, .seed = 9, .min_p = 0.05f};
  with_defaults.default_penalties.repetition = 1.05f;
  auto request = parse_completion_request(R"({"prompt": "hi"})", false, with_defaults);
  EXPECT_FLOAT_EQ(request.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(request.penalties.repetition, 1.05f);
  EXPECT_FLOAT_EQ(parse_completion_request(R"({"prompt": "hi", "repetition_penalty": 1, "min_p": 0})", false,
                                           with_defaults).penalties.repetition, 1.0f);
  EXPECT_FLOAT_EQ(request.sampling.temperature, 0.6f);
  EXPECT_EQ(request.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(request.sampling.top_p, 0.95f);
  EXPECT_EQ(request.sampling.seed, 0u);
  EXPECT_FALSE(request.seeded);

  request = parse_completion_request(R"({"messages": [{"role": "user", "content": "u"}], "temperature": 0,
                                         "top_k": -1})",
                                     true, with_defaults);
  EXPECT_EQ(request.sampling.temperature, 0.0f);
  EXPECT_EQ(request.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(request.sampling.top_p, 0.95f);

  request = parse_completion_request(R"({"prompt": "hi"})", false, limits());
  EXPECT_EQ(request.sampling.temperature, 0.0f);  // no defaults: greedy
  EXPECT_EQ(request.sampling.top_k, 0);
  EXPECT_EQ(request.sampling.top_p, 1.0f);
}

TEST(ServerValidation, BadBodiesNameTheField) {
  const std::vector<std::tuple<std::string, bool, int, std::string>> cases = {
      {"{not json", false, 400, ""},
      {"[1, 2]", false, 400, ""},
      {"\"text\"", false, 400, ""},
      {std::string("{\"prompt\": \"a\xff\"}"), false, 400, ""},
      {std::string(100, '[') + std::string(100, ']'), false, 400, ""},
      {"{}", false, 400, "prompt"},
      {R"({"prompt": ""})", false, 400, "prompt"},
      {R"({"prompt": []})", false, 400, "prompt"},
      {R"({"prompt": 5})", false, 400, "prompt"},
      {R"({"prompt": ["a", [1]]})", false, 400, "prompt"},
      {R"({"prompt": [[1], 2]})", false, 400, "prompt"},
      {R"({"prompt": [1, "a"]})", false, 400, "prompt"},
      {R"({"prompt": ["a", ""]})", false, 400, "prompt"},
      {R"({"prompt": [[1], []]})", false, 400, "prompt"},
      {R"({"prompt": [[1], [100]]})", false, 400, "prompt"},
      {R"({"prompt": [1, 100]})", false, 400, "prompt"},
      {R"({"prompt": [1, -1]})", false, 400, "prompt"},
      {R"({"prompt": [1.5]})", false, 400, "prompt"},
      {R"({"prompt": "a", "model": "other"})", false, 404, "model"},
      {R"({"prompt": "a", "model": 3})", false, 400, "model"},
      {R"({"prompt": "a", "max_tokens": 0})", false, 400, "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 64})", false, 400, "max_tokens"},
      {R"({"prompt": "a", "max_tokens": "5"})", false, 400, "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 2.5})", false, 400, "max_tokens"},
      {R"({"prompt": "a", "max_tokens": 99999999999999999999})", false, 400, "max_tokens"},
      {R"({"prompt": "a", "n": 0})", false, 400, "n"},
      {R"({"prompt": "a", "n": 9})", false, 400, "n"},
      {R"({"prompt": "a", "n": 2, "best_of": 3})", false, 400, "best_of"},
      {R"({"prompt": "a", "temperature": -0.1})", false, 400, "temperature"},
      {R"({"prompt": "a", "temperature": 1e999})", false, 400, ""},  // out of double range: not JSON
      {R"({"prompt": "a", "temperature": "hot"})", false, 400, "temperature"},
      {R"({"prompt": "a", "top_p": 0})", false, 400, "top_p"},
      {R"({"prompt": "a", "top_p": 1.5})", false, 400, "top_p"},
      {R"({"prompt": "a", "top_k": -2})", false, 400, "top_k"},
      {R"({"prompt": "a", "stop": ["1", "2", "3", "4", "5"]})", false, 400, "stop"},
      {R"({"prompt": "a", "stop": [""]})", false, 400, "stop"},
      {R"({"prompt": "a", "stop": 3})", false, 400, "stop"},
      {R"({"prompt": "a", "stream": "yes"})", false, 400, "stream"},
      {R"({"prompt": "a", "stream_options": {"include_usage": true}})", false, 400, "stream_options"},
      {R"({"prompt": "a", "stream": true, "stream_options": {"continuous_usage_stats": 1}})", false, 400,
       "stream_options.continuous_usage_stats"},
      {R"({"prompt": "a", "logprobs": 6})", false, 400, "logprobs"},
      {R"({"prompt": "a", "logprobs": -1})", false, 400, "logprobs"},
      {R"({"prompt": "a", "logprobs": true})", false, 400, "logprobs"},
      {R"({"prompt": "a", "top_logprobs": 2})", false, 400, "top_logprobs"},
      {R"({"prompt": "a", "logit_bias": {"100": 1}})", false, 400, "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"-1": 1}})", false, 400, "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"x": 1}})", false, 400, "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"5": 101}})", false, 400, "logit_bias"},
      {R"({"prompt": "a", "logit_bias": {"5": "1"}})", false, 400, "logit_bias"},
      {R"({"prompt": "a", "logit_bias": [5]})", false, 400, "logit_bias"},
      {R"({"prompt": "a", "return_tokens_as_token_ids": 1})", false, 400, "return_tokens_as_token_ids"},
      {R"({"prompt": "a", "presence_penalty": 3})", false, 400, "presence_penalty"},
      {R"({"prompt": "a", "frequency_penalty": -2.5})", false, 400, "frequency_penalty"},
      {R"({"prompt": "a", "frequency_penalty": "1"})", false, 400, "frequency_penalty"},
      {R"({"prompt": "a", "repetition_penalty": 0})", false, 400, "repetition_penalty"},
      {R"({"prompt": "a", "min_p": 1.5})", false, 400, "min_p"},
      {R"({"prompt": "a", "seed": "x"})", false, 400, "seed"},
      {R"({"prompt": "a", "echo": true})", false, 400, "echo"},
      {"{}", true, 400, "messages"},
      {R"({"messages": []})", true, 400, "messages"},
      {R"({"messages": "hi"})", true, 400, "messages"},
      {R"({"messages": [5]})", true, 400, "messages[0]"},
      {R"({"messages": [{"content": "x"}]})", true, 400, "messages[0].role"},
      {R"({"messages": [{"role": "king", "content": "x"}]})", true, 400, "messages[0].role"},
      {R"({"messages": [{"role": "user"}]})", true, 400, "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", true, 400, "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", true, 400, "logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", true, 400, "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})", true, 400,
       "top_logprobs"},
  };
  for (const auto& [body, chat, status, param] : cases) {
    const auto [got_status, got_param] = outcome(body, chat);
    EXPECT_EQ(got_status, status) << body;
    EXPECT_EQ(got_param, param) << body;
  }
}

TEST(ServerValidation, ChoicesLogprobsAndLogitBias) {
  auto request = parse_completion_request(R"({"prompt": "a", "n": 3, "best_of": 3, "logprobs": 5,
                                              "logit_bias": {"7": -100, "99": 2.5}})",
                                          false, limits());
  EXPECT_EQ(request.n, 3);
  EXPECT_EQ(request.logprobs, 5);
  EXPECT_EQ(request.logit_bias, (std::vector<std::pair<int32_t, float>>{{7, -100.0f}, {99, 2.5f}}));
  EXPECT_FALSE(request.tokens_as_ids);
  EXPECT_TRUE(parse_completion_request(R"({"prompt": "a", "return_tokens_as_token_ids": true})", false, limits()).tokens_as_ids);
  request = parse_completion_request(R"({"prompt": "a", "logprobs": 0})", false, limits());
  EXPECT_EQ(request.logprobs, 0);
  request = parse_completion_request(R"({"prompt": "a"})", false, limits());
  EXPECT_EQ(request.logprobs, -1);
  EXPECT_EQ(request.n, 1);
  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}], )";
  EXPECT_EQ(parse_completion_request(chat + R"("logprobs": true})", true, limits()).logprobs, 0);
  EXPECT_EQ(parse_completion_request(chat + R"("logprobs": true, "top_logprobs": 20})", true, limits()).logprobs, 20);
  EXPECT_EQ(parse_completion_request(chat + R"("logprobs": false})", true, limits()).logprobs, -1);
  // top_logprobs 0 (its default) without logprobs asks for none, as vLLM takes it; more is a 400.
  EXPECT_EQ(parse_completion_request(chat + R"("top_logprobs": 0})", true, limits()).logprobs, -1);
  EXPECT_EQ(parse_completion_request(chat + R"("logprobs": false, "top_logprobs": 0})", true, limits()).logprobs, -1);
  EXPECT_EQ(parse_completion_request(chat + R"("logprobs": true, "top_logprobs": 0})", true, limits()).logprobs, 0);
}

TEST(ServerValidation, MaxTokensAgainstThePrompt) {
  auto request = parse_completion_request(R"({"prompt": "a"})", false, limits());
  EXPECT_EQ(max_tokens_for(request, 10, limits()), 16);
  request = parse_completion_request(R"({"messages": [{"role": "user", "content": "x"}]})", true, limits());
  EXPECT_EQ(max_tokens_for(request, 10, limits()), 54);  // what is left of the context
  // The 400 names the field the request used.
  for (const std::string name : {"max_tokens", "max_completion_tokens"}) {
    request = parse_completion_request(R"({"messages": [{"role": "user", "content": "x"}], ")" + name + R"(": 60})",
                                       true, limits());
    try {
      max_tokens_for(request, 10, limits());
      ADD_FAILURE() << name << ": no error";
    } catch (const ApiError& error) {
      EXPECT_EQ(error.param, name);
      EXPECT_NE(std::string(error.what()).find("plus " + name), std::string::npos) << error.what();
    }
  }
  request = parse_completion_request(R"({"prompt": "a"})", false, limits());
  EXPECT_THROW(max_tokens_for(request, 64, limits()), ApiError);
}

TEST(ServerValidation, ErrorBodyAndKeyCompare) {
  const auto body = error_body(ApiError(400, "bad", "top_p"));
  EXPECT_EQ(body["error"]["param"], "top_p");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(constant_time_equal("secret", "secret"));
  EXPECT_FALSE(constant_time_equal("secret", "secreT"));
  EXPECT_FALSE(constant_time_equal("secret", "secret1"));
  EXPECT_FALSE(constant_time_equal("", "x"));
}

// The vt extension num_speculative_tokens: 0 always parses (plain decoding); other values need a
// server that speculates and lie in [0, its k]; the error names the field.
TEST(ServerValidation, NumSpeculativeTokens) {
  ValidationLimits off = limits();
  auto status_of = [](const std::string& body, const ValidationLimits& with) -> std::pair<int, std::string> {
    try {
      parse_completion_request(body, false, with);
    } catch (const ApiError& error) {
      return {error.status, error.param};
    }
    return {0, ""};
  };
  EXPECT_EQ(parse_completion_request(R"({"prompt": "a"})", false, off).num_speculative_tokens, -1);
  EXPECT_EQ(parse_completion_request(R"({"prompt": "a", "num_speculative_tokens": 0})", false, off).num_speculative_tokens, 0);
  try {
    parse_completion_request(R"({"prompt": "a", "num_speculative_tokens": 2})", false, off);
    FAIL() << "no error";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.status, 400);
    EXPECT_EQ(error.param, "num_speculative_tokens");
    EXPECT_NE(std::string(error.what()).find("not enabled on this server"), std::string::npos) << error.what();
  }
  ValidationLimits on = limits();
  on.max_num_draft = 4;
  EXPECT_EQ(parse_completion_request(R"({"prompt": "a", "num_speculative_tokens": 4})", false, on).num_speculative_tokens, 4);
  EXPECT_EQ(parse_completion_request(R"({"messages": [{"role": "user", "content": "u"}], "num_speculative_tokens": 1})",
                                     true, on)
                .num_speculative_tokens,
            1);
  const std::pair<int, std::string> bad = {400, "num_speculative_tokens"};
  for (const char* value : {"5", "-1", "1.5", "\"2\"", "true", "[1]", "99999999999999999999"})
    EXPECT_EQ(status_of(std::string(R"({"prompt": "a", "num_speculative_tokens": )") + value + "}", on), bad) << value;
}

}  // namespace
}  // namespace vt::server
