// Field-by-field checks of /v1/completions and /v1/chat/completions bodies.
#include "server/validation.h"

#include <cmath>
#include <limits>

#include "tokenizer/utf8.h"

namespace vt::server {

void invalid(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

const nlohmann::ordered_json* field(const nlohmann::ordered_json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

namespace {

using Json = nlohmann::ordered_json;

double number(const Json& value, const char* name) {
  if (!value.is_number()) invalid(name, std::string("'") + name + "' must be a number");
  const double result = value.get<double>();
  if (!std::isfinite(result)) invalid(name, std::string("'") + name + "' must be finite");
  return result;
}

int64_t integer(const Json& value, const char* name) {
  if (!value.is_number_integer()) invalid(name, std::string("'") + name + "' must be an integer");
  if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    invalid(name, std::string("'") + name + "' is out of range");
  return value.get<int64_t>();
}

bool boolean(const Json& value, const char* name) {
  if (!value.is_boolean()) invalid(name, std::string("'") + name + "' must be a boolean");
  return value.get<bool>();
}

// Token ids of one prompt, each in the vocabulary.
std::vector<int32_t> prompt_token_ids(const Json& ids, const ValidationLimits& limits) {
  if (ids.empty()) invalid("prompt", "'prompt' must not be empty");
  std::vector<int32_t> result;
  for (const Json& id : ids) {
    if (!id.is_number_integer()) invalid("prompt", "'prompt' token ids must be integers");
    const int64_t value = id.is_number_unsigned() && id.get<uint64_t>() > uint64_t(limits.vocab_size)
                              ? limits.vocab_size
                              : id.get<int64_t>();
    if (value < 0 || value >= limits.vocab_size)
      invalid("prompt", "token id " + id.dump() + " is outside the vocabulary [0, " + std::to_string(limits.vocab_size) + ")");
    result.push_back(int32_t(value));
  }
  return result;
}

// A text, a list of token ids, or a batch: a list of texts or of token-id lists.
void parse_prompt(const Json& body, CompletionRequest& request, const ValidationLimits& limits) {
  const Json* prompt = field(body, "prompt");
  if (!prompt) invalid("prompt", "'prompt' is required");
  auto add_text = [&](const Json& text) {
    if (text.get_ref<const std::string&>().empty()) invalid("prompt", "'prompt' must not be empty");
    request.prompts.push_back({text.get<std::string>(), {}});
  };
  if (prompt->is_string()) return add_text(*prompt);
  if (!prompt->is_array()) invalid("prompt", "'prompt' must be a string, a list of token ids or a list of prompts");
  if (prompt->empty()) invalid("prompt", "'prompt' must not be empty");
  const Json& first = prompt->front();
  if (!first.is_string() && !first.is_array()) {
    request.prompts.push_back({"", prompt_token_ids(*prompt, limits)});
    return;
  }
  if (int64_t(prompt->size()) > limits.max_prompts)
    invalid("prompt", "'prompt' has " + std::to_string(prompt->size()) + " prompts; at most " +
                          std::to_string(limits.max_prompts) + " are allowed");
  for (const Json& item : *prompt) {
    if (first.is_string() != item.is_string() || first.is_array() != item.is_array())
      invalid("prompt", "a list of prompts must be all strings or all lists of token ids");
    if (item.is_string()) add_text(item);
    else request.prompts.push_back({"", prompt_token_ids(item, limits)});
  }
}

void parse_messages(const Json& body, CompletionRequest& request) {
  const Json* messages = field(body, "messages");
  if (!messages) invalid("messages", "'messages' is required");
  if (!messages->is_array()) invalid("messages", "'messages' must be a list");
  if (messages->empty()) invalid("messages", "'messages' must not be empty");
  request.messages = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& message = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!message.is_object()) invalid(where, where + " must be an object");
    const Json* role = field(message, "role");
    if (!role || !role->is_string()) invalid(where + ".role", where + ".role must be a string");
    const std::string role_name = role->get<std::string>();
    if (role_name != "system" && role_name != "user" && role_name != "assistant" && role_name != "developer" &&
        role_name != "tool")
      invalid(where + ".role", where + ".role '" + role_name + "' is not one of system, developer, user, assistant, tool");
    const Json* content = field(message, "content");
    std::string text;
    if (content && content->is_string()) {
      text = content->get<std::string>();
    } else if (content && content->is_array()) {
      // [{"type": "text", "text": "..."}], one part per line as vLLM and llama.cpp join them for a
      // template that reads content as a string (glued, a part's last word ran into the next's first).
      for (size_t part_index = 0; part_index < content->size(); ++part_index) {
        const Json& part = (*content)[part_index];
        const Json* type = part.is_object() ? field(part, "type") : nullptr;
        const Json* part_text = part.is_object() ? field(part, "text") : nullptr;
        if (!type || *type != "text" || !part_text || !part_text->is_string())
          invalid(where + ".content", where + ".content parts must be {\"type\": \"text\", \"text\": string}");
        if (part_index > 0) text += '\n';
        text += part_text->get<std::string>();
      }
    } else if (content || role_name != "assistant") {
      invalid(where + ".content", where + ".content must be a string or a list of text parts");
    }
    Json out = {{"role", role_name == "developer" ? "system" : role_name}, {"content", text}};
    add_message_agent_fields(message, role_name, where, out);
    request.messages.push_back(std::move(out));
  }
}

void parse_stop(const Json& body, CompletionRequest& request, const ValidationLimits& limits) {
  const Json* stop = field(body, "stop");
  if (!stop) return;
  if (stop->is_string()) {
    request.stop.push_back(stop->get<std::string>());
  } else if (stop->is_array()) {
    if (int64_t(stop->size()) > limits.max_stop_strings)
      invalid("stop", "'stop' has " + std::to_string(stop->size()) + " strings; at most " +
                          std::to_string(limits.max_stop_strings) + " are allowed");
    for (const Json& item : *stop) {
      if (!item.is_string()) invalid("stop", "'stop' must be a string or a list of strings");
      request.stop.push_back(item.get<std::string>());
    }
  } else {
    invalid("stop", "'stop' must be a string or a list of strings");
  }
  for (const std::string& text : request.stop) {
    if (text.empty()) invalid("stop", "stop strings must not be empty");
    if (int64_t(text.size()) > limits.max_stop_bytes)
      invalid("stop", "stop strings must be at most " + std::to_string(limits.max_stop_bytes) + " bytes");
  }
}

// n, logprobs / top_logprobs and logit_bias.
void parse_choices_and_logprobs(const Json& body, CompletionRequest& request, const ValidationLimits& limits) {
  if (const Json* n = field(body, "n")) {
    request.n = integer(*n, "n");
    if (request.n < 1 || request.n > limits.max_n)
      invalid("n", "'n' must be in [1, " + std::to_string(limits.max_n) + "]");
  }
  if (const Json* best_of = field(body, "best_of"); best_of && integer(*best_of, "best_of") != request.n)
    invalid("best_of", "'best_of' must equal 'n' (choices are not ranked)");
  const Json* logprobs = field(body, "logprobs");
  const Json* top_logprobs = field(body, "top_logprobs");
  if (request.chat) {
    const bool asked = logprobs && boolean(*logprobs, "logprobs");
    if (top_logprobs) {
      const int64_t count = integer(*top_logprobs, "top_logprobs");
      if (count < 0 || count > 20) invalid("top_logprobs", "'top_logprobs' must be in [0, 20]");
      // 0 is the field's default, sent by clients that fill every field: without logprobs it asks
      // for nothing (vLLM refuses only a count it could not honour).
      if (!asked && count > 0) invalid("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      if (asked) request.logprobs = count;
    } else if (asked) {
      request.logprobs = 0;
    }
  } else {
    if (logprobs) {
      request.logprobs = integer(*logprobs, "logprobs");
      if (request.logprobs < 0 || request.logprobs > 5) invalid("logprobs", "'logprobs' must be in [0, 5]");
    }
    if (top_logprobs) invalid("top_logprobs", "'top_logprobs' is a chat field; completions take 'logprobs': 0..5");
  }
  for (const auto& [name, value] : {std::pair{"presence_penalty", &request.penalties.presence},
                                    std::pair{"frequency_penalty", &request.penalties.frequency}}) {
    const Json* penalty = field(body, name);
    if (!penalty) continue;
    const double amount = number(*penalty, name);
    if (amount < -2 || amount > 2) invalid(name, std::string("'") + name + "' must be in [-2, 2]");
    *value = float(amount);
  }
  if (const Json* penalty = field(body, "repetition_penalty")) {
    const double amount = number(*penalty, "repetition_penalty");
    if (!(amount > 0)) invalid("repetition_penalty", "'repetition_penalty' must be > 0");
    request.penalties.repetition = float(amount);
  }
  if (const Json* as_ids = field(body, "return_tokens_as_token_ids"))
    request.tokens_as_ids = boolean(*as_ids, "return_tokens_as_token_ids");
  if (const Json* bias = field(body, "logit_bias")) {
    if (!bias->is_object()) invalid("logit_bias", "'logit_bias' must be an object of token id -> bias");
    if (int64_t(bias->size()) > limits.max_logit_bias)
      invalid("logit_bias", "'logit_bias' has " + std::to_string(bias->size()) + " entries; at most " +
                                std::to_string(limits.max_logit_bias) + " are allowed");
    for (const auto& [key, value] : bias->items()) {
      const bool digits = !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos;
      const int64_t id = digits ? std::stoll(key) : -1;
      if (id < 0 || id >= limits.vocab_size)
        invalid("logit_bias", "logit_bias key '" + key + "' is not a token id in [0, " +
                                  std::to_string(limits.vocab_size) + ")");
      const double amount = number(value, "logit_bias");
      if (amount < -100 || amount > 100) invalid("logit_bias", "logit_bias values must be in [-100, 100]");
      request.logit_bias.emplace_back(int32_t(id), float(amount));
    }
  }
}

// Fields vt does not implement are refused unless they ask for the default behaviour.
void refuse_unsupported(const Json& body) {
  if (const Json* echo = field(body, "echo"); echo && boolean(*echo, "echo")) invalid("echo", "'echo' is not supported");
  if (field(body, "suffix")) invalid("suffix", "'suffix' is not supported");
  for (const char* name : {"tools", "tool_choice", "response_format"})
    if (field(body, name) && !field(body, "messages"))
      invalid(name, std::string("'") + name + "' is a chat field (/v1/chat/completions)");
}

}  // namespace

bool nesting_exceeds(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

nlohmann::json error_body(const ApiError& error) {
  const char* type = error.status == 401 ? "authentication_error"
                     : error.status == 404 ? "not_found_error"
                     : error.status >= 500 ? "server_error"
                                           : "invalid_request_error";
  nlohmann::json body = {{"message", error.what()}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!error.param.empty()) body["param"] = error.param;
  if (!error.code.empty()) body["code"] = error.code;
  return {{"error", body}};
}

CompletionRequest parse_completion_request(std::string_view text, bool chat, const ValidationLimits& limits) {
  if (!utf8::is_valid(text)) invalid("", "the request body is not valid UTF-8");
  if (nesting_exceeds(text, kMaxJsonNesting))
    invalid("", "the request body nests deeper than " + std::to_string(kMaxJsonNesting) + " levels");
  Json body = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) invalid("", "the request body is not valid JSON");
  if (!body.is_object()) invalid("", "the request body must be a JSON object");

  CompletionRequest request;
  request.chat = chat;
  request.sampling = limits.default_sampling;
  request.penalties = limits.default_penalties;
  request.sampling.seed = 0;
  if (const Json* model = field(body, "model")) {
    if (!model->is_string()) invalid("model", "'model' must be a string");
    if (model->get<std::string>() != limits.model_name)
      throw ApiError(404, "the model '" + model->get<std::string>() + "' does not exist; this server serves '" +
                              limits.model_name + "'", "model", "model_not_found");
  }
  if (chat) {
    parse_messages(body, request);
    request.chat_options = parse_chat_options(body);
  } else
    parse_prompt(body, request, limits);

  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    const Json* max_tokens = field(body, name);
    if (!max_tokens) continue;
    const int64_t value = integer(*max_tokens, name);
    if (value < 1 || value >= limits.max_total_tokens)
      invalid(name, std::string("'") + name + "' must be in [1, " + std::to_string(limits.max_total_tokens - 1) + "]");
    request.max_tokens = value;
    request.max_tokens_field = name;
  }
  if (const Json* temperature = field(body, "temperature")) {
    request.sampling.temperature = float(number(*temperature, "temperature"));
    if (request.sampling.temperature < 0 || request.sampling.temperature > 2)
      invalid("temperature", "'temperature' must be in [0, 2]");
  }
  if (const Json* top_p = field(body, "top_p")) {
    const double value = number(*top_p, "top_p");
    if (!(value > 0 && value <= 1)) invalid("top_p", "'top_p' must be in (0, 1]");
    request.sampling.top_p = float(value);
  }
  if (const Json* top_k = field(body, "top_k")) {
    const int64_t value = integer(*top_k, "top_k");
    if (value < -1) invalid("top_k", "'top_k' must be -1 (off), 0 (off) or positive");
    request.sampling.top_k = value < 0 ? 0 : value;
  }
  if (const Json* min_p = field(body, "min_p")) {  // vLLM's
    const double value = number(*min_p, "min_p");
    if (value < 0 || value > 1) invalid("min_p", "'min_p' must be in [0, 1]");
    request.sampling.min_p = float(value);
  }
  if (const Json* seed = field(body, "seed")) {
    request.sampling.seed = uint64_t(integer(*seed, "seed"));
    request.seeded = true;
  }
  parse_stop(body, request, limits);
  if (const Json* stream = field(body, "stream")) request.stream = boolean(*stream, "stream");
  if (const Json* options = field(body, "stream_options")) {
    if (!request.stream) invalid("stream_options", "'stream_options' is only allowed when 'stream' is true");
    if (!options->is_object()) invalid("stream_options", "'stream_options' must be an object");
    if (const Json* usage = field(*options, "include_usage"))
      request.include_usage = boolean(*usage, "stream_options.include_usage");
    if (const Json* continuous = field(*options, "continuous_usage_stats"))  // only with include_usage, as vLLM
      request.continuous_usage = boolean(*continuous, "stream_options.continuous_usage_stats") && request.include_usage;
  }
  parse_choices_and_logprobs(body, request, limits);
  if (const Json* drafts = field(body, "num_speculative_tokens")) {
    const int64_t value = integer(*drafts, "num_speculative_tokens");
    if (limits.max_num_draft == 0 && value != 0)
      invalid("num_speculative_tokens",
              "speculative decoding is not enabled on this server (vt serve --speculative ngram); "
              "'num_speculative_tokens' can only be 0");
    if (value < 0 || value > limits.max_num_draft)
      invalid("num_speculative_tokens",
              "'num_speculative_tokens' must be in [0, " + std::to_string(limits.max_num_draft) + "]");
    request.num_speculative_tokens = value;
  }
  refuse_unsupported(body);
  return request;
}

int64_t max_tokens_for(const CompletionRequest& request, int64_t prompt_tokens, const ValidationLimits& limits) {
  const char* prompt_field = request.chat ? "messages" : "prompt";
  if (prompt_tokens < 1) invalid(prompt_field, std::string("'") + prompt_field + "' encodes to no tokens");
  const int64_t room = limits.max_total_tokens - prompt_tokens;
  if (room < 1)
    invalid(prompt_field, "the prompt is " + std::to_string(prompt_tokens) + " tokens; this server's context is " +
                              std::to_string(limits.max_total_tokens) + " tokens");
  if (request.max_tokens == 0) return std::min<int64_t>(request.chat ? limits.default_chat_max_tokens : 16, room);
  if (request.max_tokens > room)
    invalid(request.max_tokens_field, "the prompt (" + std::to_string(prompt_tokens) + " tokens) plus " +
                                          request.max_tokens_field + " (" + std::to_string(request.max_tokens) +
                                          ") exceeds this server's context of " +
                                          std::to_string(limits.max_total_tokens) + " tokens");
  return request.max_tokens;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char difference = a.size() == b.size() ? 0 : 1;
  const size_t length = std::max(a.size(), b.size());
  for (size_t i = 0; i < length; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    difference |= static_cast<unsigned char>(x ^ y);
  }
  return difference == 0;
}

}  // namespace vt::server
