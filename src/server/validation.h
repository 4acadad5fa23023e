// Validation at the edge: a request body becomes a checked CompletionRequest or an ApiError
// (HTTP 4xx with an OpenAI-style error object naming the field). Nothing unchecked reaches the engine.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/penalties.h"
#include "ops/sampling/sampler.h"
#include "server/chat_request.h"

namespace vt::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "", std::string code = "")
      : std::runtime_error(message), status(status), param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string param;  // the offending field ("" when the whole body is at fault)
  std::string code;
};

// {"error": {"message", "type", "param", "code"}} as the OpenAI API sends it.
nlohmann::json error_body(const ApiError& error);

// Throws the 400 that names `param`.
[[noreturn]] void invalid(const std::string& param, const std::string& message);
// body[name], or null when it is absent or JSON null (both mean "not given").
const nlohmann::ordered_json* field(const nlohmann::ordered_json& body, const char* name);

// Nesting deeper than any API body, refused before parsing: deep trees cost stack to copy and
// destroy. Bodies, and JSON texts inside them (tool-call arguments), are held to kMaxJsonNesting.
constexpr int kMaxJsonNesting = 32;
bool nesting_exceeds(std::string_view text, int limit);

struct ValidationLimits {
  std::string model_name;      // requests naming another model get 404
  int64_t vocab_size = 0;      // token-id prompts must lie in [0, vocab_size)
  int64_t max_total_tokens = 0;  // prompt + max_tokens
  int64_t max_stop_strings = 4;
  int64_t max_stop_bytes = 256;
  int64_t default_chat_max_tokens = 512;
  int64_t max_n = 8;               // choices per prompt
  int64_t max_prompts = 64;        // prompts in a completions batch
  int64_t max_logit_bias = 1024;   // entries in logit_bias
  int64_t max_num_draft = 0;       // speculative drafts a request may ask for (0: speculation off)
  // For requests that leave temperature, top_k, top_p or min_p out (greedy unless vt serve took the
  // model's generation_config.json sampling, as vLLM does); its seed is not used.
  SamplingParams default_sampling;
  Penalties default_penalties;  // likewise (generation_config.json's repetition_penalty)
};

struct CompletionRequest {
  bool chat = false;
  // Completions: the prompts, each a text or token ids (then its text is empty). A list of several
  // is a batch, as vLLM and OpenAI take it: n choices per prompt, prompt i's at i * n .. i * n + n - 1.
  struct Prompt {
    std::string text;
    std::vector<int32_t> ids;
  };
  std::vector<Prompt> prompts;
  nlohmann::ordered_json messages;  // chat: [{role, content (a string), agent fields (chat_request.h)}]
  ChatOptions chat_options;         // chat: tools, tool_choice, response_format, template variables
  int64_t max_tokens = 0;           // 0: not given (max_tokens_for gives the default)
  std::string max_tokens_field = "max_tokens";  // or max_completion_tokens: what errors name
  SamplingParams sampling;
  bool seeded = false;
  std::vector<std::string> stop;
  bool stream = false, include_usage = false;
  // stream_options.continuous_usage_stats (vLLM's, with include_usage): every chunk carries usage so far.
  bool continuous_usage = false;
  int64_t n = 1;  // choices, each its own sequence
  // -1: no logprobs. Else how many top alternatives per token (completions: `logprobs` 0..5;
  // chat: `top_logprobs` 0..20 with `logprobs: true`).
  int64_t logprobs = -1;
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> bias in [-100, 100]
  // presence_penalty and frequency_penalty in [-2, 2] (OpenAI's); repetition_penalty > 0 (vLLM's).
  Penalties penalties;
  bool tokens_as_ids = false;  // vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:N"
  // vt extension `num_speculative_tokens`: drafts verified per step for this request (0: plain
  // decoding); -1: not given (the server's default).
  int64_t num_speculative_tokens = -1;
};

// Throws ApiError for any body the server cannot serve exactly as asked.
CompletionRequest parse_completion_request(std::string_view body, bool chat, const ValidationLimits& limits);

// Once the prompt is tokenized: checks prompt + max_tokens against the limit and gives the
// max_tokens to use (the request's, else 16 for completions, as OpenAI; what is left up to a cap for chat).
int64_t max_tokens_for(const CompletionRequest& request, int64_t prompt_tokens, const ValidationLimits& limits);

// Equal strings in time that depends only on their lengths (API keys).
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace vt::server
