// The OpenAI routes over the HTTP transport (server/http_server.h): validation, prompt building
// (chat template), submission to the engine (one sequence per choice), and the answer as one JSON
// body or as SSE chunks, written from the engine's events on the connection's thread; a client that
// hangs up cancels its request, streaming or not. CORS, auth, the in-flight cap and the shutdown
// drain sit in front.
#include "server/server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_set>

#include "core/error.h"
#include "server/chat_response.h"
#include "server/grammar.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/validation.h"
#include "tokenizer/utf8.h"

namespace vt::server {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct ChoiceEvent {
  int index = 0;
  TokenEvent event;
};

// Events of one request's choices, handed from the engine thread to the connection's thread.
struct Channel {
  std::mutex mutex;
  std::deque<ChoiceEvent> events;

  void push(int index, const TokenEvent& event) {
    std::lock_guard<std::mutex> lock(mutex);
    events.push_back({index, event});
  }
  // What arrived since the last take (possibly nothing).
  std::deque<ChoiceEvent> take() {
    std::lock_guard<std::mutex> lock(mutex);
    std::deque<ChoiceEvent> taken;
    taken.swap(events);
    return taken;
  }
};

// One choice (one engine sequence) of a request.
struct Choice {
  int64_t engine_id = 0;
  size_t prompt = 0;  // its prompt in a completions batch
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens the engine took from the prefix cache
  std::string text;  // all text so far
  // Code points of the tokens' own texts so far: a token's text_offset (code points, as Python
  // counts). Not of `text`, which lags while a possible stop string or a partial character is held.
  int64_t token_chars = 0;
  bool finished = false;
  bool finish_sent = false;  // streaming: its chunk with a finish_reason is written
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;
  bool retryable = false;  // the error came before the engine ran it (TokenEvent::retryable)
  // Logprobs not yet sent: chat {"content": [...]}; completions {tokens, token_logprobs, top_logprobs, text_offset}.
  Json logprobs;
  std::shared_ptr<ChatChoiceOutput> output;  // chat: reasoning, content and tool calls parsed from `text`
};

// One accepted request as the response writers see it.
struct Job {
  CompletionRequest request;
  std::string id, model;
  int64_t created = 0;
  int64_t prompt_tokens = 0;          // all prompts'
  std::vector<int64_t> prompt_sizes;  // each prompt's tokens
  int64_t cache_point = 0;  // chat: where the generation prompt starts (RequestParams::cache_point)
  std::vector<Choice> choices;
  OutputParserOptions output_options;  // chat: how the output is parsed (tool-call format, reasoning)
  std::shared_ptr<Channel> channel = std::make_shared<Channel>();
  // The answer's side, touched on the connection's thread once `ready`.
  std::shared_ptr<HttpExchange> exchange;
  std::shared_ptr<void> admission;  // the slot among the requests in flight, released when answered
  std::atomic<bool> ready{false};   // submitted: events may be written
  std::atomic<bool> pump_queued{false};
  std::atomic<bool> shutdown{false};  // cancelled by the drain, not by its client
  bool stream_started = false, ended = false;

  bool all_finished() const {
    return std::all_of(choices.begin(), choices.end(), [](const Choice& choice) { return choice.finished; });
  }
  int64_t completion_tokens() const {
    int64_t total = 0;
    for (const Choice& choice : choices) total += choice.completion_tokens;
    return total;
  }
  // Counted once per prompt, as prompt_tokens is: the fewest any of its choices took from the
  // cache, so that it never exceeds prompt_tokens and a choice reusing its sibling's prompt does not count.
  int64_t cached_tokens() const {
    std::vector<int64_t> fewest(prompt_sizes.size(), std::numeric_limits<int64_t>::max());
    for (const Choice& choice : choices) fewest[choice.prompt] = std::min(fewest[choice.prompt], choice.cached_tokens);
    int64_t total = 0;
    for (const int64_t count : fewest)
      if (count != std::numeric_limits<int64_t>::max()) total += count;
    return total;
  }
};

Json usage_json(const Job& job) {
  const int64_t completion = job.completion_tokens();
  return {{"prompt_tokens", job.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", job.prompt_tokens + completion},
          {"prompt_tokens_details", {{"cached_tokens", job.cached_tokens()}}}};
}

Json empty_logprobs(bool chat) {
  if (chat) return {{"content", Json::array()}, {"refusal", nullptr}};
  return {{"tokens", Json::array()}, {"token_logprobs", Json::array()}, {"top_logprobs", Json::array()},
          {"text_offset", Json::array()}};
}

int64_t code_points(const std::string& text) {
  int64_t count = 0;
  for (unsigned char c : text) count += (c & 0xC0) != 0x80;
  return count;
}

// A streaming chunk with one choice (text or delta, and its logprobs when asked). Chat deltas carry
// the parsed `fields` (content, reasoning_content, tool_calls) when given, else `text` as content.
Json chunk_json(const Job& job, int index, const std::string& text, const char* finish_reason, bool role,
                Json logprobs, const Json* fields = nullptr) {
  Json choice = {{"index", index}};
  if (job.request.chat) {
    Json delta = Json::object();
    if (role) delta["role"] = "assistant";
    if (fields) delta.update(*fields);
    else if (role || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_reason ? Json(finish_reason) : Json(nullptr);
  Json chunk = {{"id", job.id},
                {"object", job.request.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", job.created},
                {"model", job.model},
                {"choices", Json::array({choice})}};
  if (job.request.continuous_usage) {
    // As vLLM: this choice's tokens so far beside its prompt's.
    const Choice& choice = job.choices[size_t(index)];
    const int64_t prompt = job.prompt_sizes[choice.prompt];
    chunk["usage"] = {{"prompt_tokens", prompt},
                      {"completion_tokens", choice.completion_tokens},
                      {"total_tokens", prompt + choice.completion_tokens}};
  } else if (job.request.include_usage) {
    chunk["usage"] = nullptr;
  }
  return chunk;
}

std::string sse(const Json& data) { return "data: " + data.dump() + "\n\n"; }

HttpResponse json_response(int status, const nlohmann::json& body) {
  return {status, "application/json", body.dump(), {}};
}

}  // namespace

struct Server::Impl {
  Engine& engine;
  ModelTextView text;
  ServerOptions options;
  ValidationLimits limits;
  ServerMetrics metrics;
  std::atomic<int64_t> next_id{1};
  std::unique_ptr<StructuredOutput> structured;  // grammars for response_format and forced tool calls

  // Completions in flight (for the cap and the drain); each holds an Admission.
  std::mutex live_mutex;
  std::condition_variable live_changed;
  std::unordered_set<std::shared_ptr<Job>> live;
  std::atomic<bool> draining{false};
  std::atomic<int64_t> in_engine{0};  // sequences whose final event has not come yet
  std::unique_ptr<HttpServer> http;

  Impl(Engine& engine_, ModelTextView text_, ServerOptions options_)
      : engine(engine_), text(std::move(text_)), options(std::move(options_)), metrics(options.model_name) {
    VT_CHECK(text.tokenizer, "serve: the model has no tokenizer");
    limits.model_name = options.model_name;
    limits.vocab_size = engine.model().info().vocab_size;
    limits.max_total_tokens = engine.max_request_tokens();
    limits.default_chat_max_tokens = options.default_chat_max_tokens;
    check_sampling_params(options.default_sampling);
    limits.default_sampling = options.default_sampling;
    check_penalties(options.default_penalties);
    limits.default_penalties = options.default_penalties;
    limits.max_num_draft = engine.max_num_draft();
    structured = std::make_unique<StructuredOutput>(*text.tokenizer, limits.vocab_size, text.stop_ids);
    VT_CHECK(options.num_draft >= 0 && options.num_draft <= limits.max_num_draft, "serve: the default num_draft ",
             options.num_draft, " must be in [0, ", limits.max_num_draft, "] (the engine's max_num_draft)");
    HttpServerOptions transport = options.http;
    transport.host = options.host;
    transport.port = options.port;
    transport.max_body_bytes = options.max_body_bytes;
    http = std::make_unique<HttpServer>(
        transport, routes(), [this](const HttpRequest& request, HttpHeaders& extra) { return screen(request, extra); },
        [](int status, const std::string& message) { return error_body(ApiError(status, message)).dump(); },
        [this](int status) { metrics.record_response(status); });
  }

  ~Impl() {
    // Engine callbacks post to connections: let every sequence end before the transport goes.
    {
      std::lock_guard<std::mutex> lock(live_mutex);
      for (const auto& job : live) cancel(*job);
    }
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (in_engine > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  bool origin_allowed(const std::string& origin) const {
    if (origin.empty()) return false;
    for (const std::string& allowed : options.allowed_origins)
      if (allowed == "*" || allowed == origin) return true;
    return false;
  }

  // On the headers alone, before any body is read: CORS, preflights, the API key.
  std::optional<HttpResponse> screen(const HttpRequest& request, HttpHeaders& extra) {
    // CORS first: a preflight carries no credentials, and error answers need the headers too.
    const std::string origin = request.header("Origin");
    const bool cors = origin_allowed(origin);
    if (cors) {
      extra.emplace_back("Access-Control-Allow-Origin", origin);
      extra.emplace_back("Vary", "Origin");
    }
    if (request.method == "OPTIONS") {
      HttpResponse response{204, "", "", {}};
      if (cors) {
        response.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        const std::string asked = request.header("Access-Control-Request-Headers");
        response.headers.emplace_back("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
        response.headers.emplace_back("Access-Control-Max-Age", "600");
      }
      response.headers.emplace_back("Allow", "GET, POST, OPTIONS");
      return response;
    }
    if (options.api_key.empty() || request.path == "/health") return std::nullopt;
    const std::string header = request.header("Authorization");
    const std::string prefix = "Bearer ";
    const bool ok = header.compare(0, prefix.size(), prefix) == 0 &&
                    constant_time_equal(std::string_view(header).substr(prefix.size()), options.api_key);
    if (ok) return std::nullopt;
    const ApiError error(401, "a valid API key is required (Authorization: Bearer KEY)", "", "invalid_api_key");
    return json_response(error.status, error_body(error));
  }

  std::vector<HttpRoute> routes() {
    std::vector<HttpRoute> routes;
    routes.push_back({"GET", "/health", [this](const std::shared_ptr<HttpExchange>& exchange) {
                        // A failed engine takes no work: a supervisor restarts the process.
                        if (engine.failed())
                          return exchange->respond(json_response(503, {{"status", "failed"}, {"error", engine.failure()}}));
                        if (draining) return exchange->respond(json_response(503, {{"status", "draining"}}));
                        exchange->respond(json_response(200, {{"status", "ok"}}));
                      }});
    routes.push_back({"GET", "/v1/models", [this](const std::shared_ptr<HttpExchange>& exchange) {
                        Json model = {{"id", options.model_name}, {"object", "model"}, {"created", int64_t(std::time(nullptr))},
                                      {"owned_by", "vt"}, {"max_model_len", limits.max_total_tokens}};
                        exchange->respond(json_response(200, Json{{"object", "list"}, {"data", Json::array({model})}}));
                      }});
    routes.push_back({"GET", "/metrics", [this](const std::shared_ptr<HttpExchange>& exchange) {
                        int64_t in_flight;
                        {
                          std::lock_guard<std::mutex> lock(live_mutex);
                          in_flight = int64_t(live.size());
                        }
                        std::string body = metrics.render(engine.stats(), in_flight);
                        body += "# HELP vt_http_connections_open Client connections open (idle, reading or answered).\n"
                                "# TYPE vt_http_connections_open gauge\nvt_http_connections_open " +
                                std::to_string(http->connections()) + "\n";
                        exchange->respond({200, "text/plain; version=0.0.4", std::move(body), {}});
                      }});
    // Parsing and tokenising a prompt takes a while: these run on the worker pool.
    routes.push_back({"POST", "/v1/completions",
                      [this](const std::shared_ptr<HttpExchange>& exchange) { complete(exchange, /*chat=*/false); }, true});
    routes.push_back({"POST", "/v1/chat/completions",
                      [this](const std::shared_ptr<HttpExchange>& exchange) { complete(exchange, /*chat=*/true); }, true});
    return routes;
  }

  static void fail(HttpExchange& exchange, const ApiError& error) {
    exchange.respond(json_response(error.status, error_body(error)));
  }

  // Each prompt's ids (chat: one); for chat also how its output is to be parsed (job.output_options).
  std::vector<std::vector<int32_t>> prompt_ids(Job& job) {
    const CompletionRequest& request = job.request;
    if (!request.chat) {
      std::vector<std::vector<int32_t>> prompts;
      for (const CompletionRequest::Prompt& prompt : request.prompts)
        prompts.push_back(prompt.ids.empty() ? text.tokenizer->encode(prompt.text) : prompt.ids);
      return prompts;
    }
    if (!text.chat_templates || text.chat_templates->templates.empty())
      throw ApiError(400, "this model has no chat template; use /v1/completions", "messages");
    const RenderedPrompt rendered = render_chat_prompt(*text.chat_templates, request.messages, request.chat_options);
    job.output_options = chat_output_options(request.chat_options, rendered);
    EncodeOptions encode;
    encode.add_special_tokens = false;  // the template has them
    std::vector<int32_t> ids = text.tokenizer->encode(rendered.text, encode);
    // The prefix cache saves a state where the generation prompt starts, when its tokens end the
    // prompt's (tokenised apart, they did not merge with the history's last ones).
    const std::vector<int32_t> tail = text.tokenizer->encode(rendered.generation_prompt, encode);
    if (!tail.empty() && tail.size() < ids.size() && std::equal(tail.rbegin(), tail.rend(), ids.rbegin()))
      job.cache_point = int64_t(ids.size() - tail.size());
    return {std::move(ids)};
  }

  // A slot among the requests in flight, or null when the cap is reached. Releasing it (the last
  // copy going away, when the response is written) frees the slot.
  std::shared_ptr<void> admit(const std::shared_ptr<Job>& job) {
    std::lock_guard<std::mutex> lock(live_mutex);
    if (options.max_concurrent_requests > 0 && int64_t(live.size()) >= options.max_concurrent_requests) return nullptr;
    live.insert(job);
    return std::shared_ptr<void>(job.get(), [this, job](void*) {
      {
        std::lock_guard<std::mutex> lock(live_mutex);
        live.erase(job);
      }
      live_changed.notify_all();
    });
  }

  ApiError engine_failed_error() const {
    return ApiError(503, "the server's engine failed and takes no new requests: " + engine.failure(), "",
                    "engine_failed");
  }

  // A choice the engine failed: 503 when it never ran (the engine had failed; another server may
  // take it), else 500.
  static ApiError generation_error(const Choice& choice) {
    if (choice.retryable) return ApiError(503, "the server's engine failed before this request ran: " + choice.error, "",
                                          "engine_failed");
    return ApiError(500, "generation failed: " + choice.error, "", "generation_failed");
  }

  void cancel(const Job& job) {
    for (const Choice& choice : job.choices) engine.cancel(choice.engine_id);  // finished ids are ignored
  }

  // On a worker thread: validates, tokenises and submits; the answer is written from the engine's
  // events (pump).
  void complete(const std::shared_ptr<HttpExchange>& exchange, bool chat) {
    const auto arrival = Clock::now();
    if (draining) return fail(*exchange, ApiError(503, "the server is shutting down", "", "server_shutting_down"));
    if (engine.failed()) return fail(*exchange, engine_failed_error());
    auto job = std::make_shared<Job>();
    job->exchange = exchange;
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int64_t> max_tokens;  // per prompt
    ConstraintFactory make_constraint;
    try {
      job->request = parse_completion_request(exchange->request().body, chat, limits);
      prompts = prompt_ids(*job);
      for (const std::vector<int32_t>& prompt : prompts)
        max_tokens.push_back(max_tokens_for(job->request, int64_t(prompt.size()), limits));
      if (chat) make_constraint = structured->constraint_for(job->request.chat_options, job->output_options);
    } catch (const ApiError& error) {
      fail(*exchange, error);
      return;
    }
    job->id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    job->model = options.model_name;
    job->created = int64_t(std::time(nullptr));
    const size_t n = size_t(job->request.n);
    job->choices.resize(prompts.size() * n);
    for (size_t index = 0; index < job->choices.size(); ++index) job->choices[index].prompt = index / n;
    for (const std::vector<int32_t>& prompt : prompts) {
      job->prompt_sizes.push_back(int64_t(prompt.size()));
      job->prompt_tokens += int64_t(prompt.size());
    }
    if (chat)
      for (Choice& choice : job->choices)
        choice.output = std::make_shared<ChatChoiceOutput>(job->output_options, job->request.chat_options.parallel_tool_calls);
    if (job->request.logprobs >= 0)
      for (Choice& choice : job->choices) choice.logprobs = empty_logprobs(chat);
    auto admission = admit(job);
    if (!admission)
      return fail(*exchange, ApiError(429,
                                     "the server is at its limit of " + std::to_string(options.max_concurrent_requests) +
                                         " requests in flight; retry later",
                                     "", "rate_limit_exceeded"));
    RequestParams params;
    params.sampling = job->request.sampling;
    const uint64_t seed = job->request.seeded ? job->request.sampling.seed : std::random_device{}();
    params.cache_point = job->cache_point;
    params.stop_token_ids = text.stop_ids;
    params.stop_strings = job->request.stop;
    params.logit_bias = job->request.logit_bias;
    params.penalties = job->request.penalties;
    params.logprobs = job->request.logprobs;
    params.num_draft = job->request.num_speculative_tokens >= 0 ? job->request.num_speculative_tokens : options.num_draft;
    params.adaptive_draft = options.adaptive_draft;
    params.seeded = job->request.seeded;
    params.make_constraint = make_constraint;
    auto first = std::make_shared<std::atomic<bool>>(false);
    try {
      std::lock_guard<std::mutex> lock(live_mutex);  // drain() reads the engine ids
      for (int index = 0; index < int(job->choices.size()); ++index) {
        const size_t prompt = job->choices[size_t(index)].prompt;
        // A prompt's choices differ; a seeded request repeats, and a batch's prompt gives what it gives alone.
        params.sampling.seed = seed + uint64_t(size_t(index) % n);
        params.max_tokens = max_tokens[prompt];
        auto last_token = std::make_shared<Clock::time_point>();  // touched on the engine thread only
        ++in_engine;
        try {
          job->choices[size_t(index)].engine_id = engine.submit(
              prompts[prompt], params, [this, job, first, arrival, last_token, index](const TokenEvent& event) {
                if (event.token_id >= 0) {
                  const auto now = Clock::now();
                  if (!first->exchange(true))
                    metrics.record_time_to_first_token(std::chrono::duration<double>(now - arrival).count());
                  if (*last_token != Clock::time_point())
                    metrics.record_inter_token_latency(std::chrono::duration<double>(now - *last_token).count());
                  *last_token = now;
                }
                job->channel->push(index, event);
                if (job->ready) schedule_pump(job);
                if (event.finished) --in_engine;  // last: the server may go once none is left
              });
        } catch (const Error&) {
          --in_engine;
          throw;
        }
      }
    } catch (const Error& error) {
      cancel(*job);
      if (engine.failed()) return fail(*exchange, engine_failed_error());  // it failed meanwhile
      fail(*exchange, ApiError(draining ? 503 : 400, error.what()));
      return;
    }
    job->admission = std::move(admission);
    exchange->on_gone([this, job] { cancel(*job); });  // streaming or not, a hang-up ends the request
    job->ready = true;
    schedule_pump(job);
  }

  // Writes the job's new events on its connection's thread, once however many events arrive meanwhile.
  void schedule_pump(const std::shared_ptr<Job>& job) {
    if (job->pump_queued.exchange(true)) return;
    job->exchange->post([this, job] {
      job->pump_queued = false;
      pump(job);
    });
  }

  void pump(const std::shared_ptr<Job>& job) {
    if (job->ended) return;
    auto events = job->channel->take();
    if (job->request.stream) return stream(job, events);
    for (const ChoiceEvent& event : events) absorb(*job, event);
    if (!job->all_finished()) return;
    answer(*job, *job->exchange);
    finish(*job);
  }

  // The answer is written (or its client is gone): the slot is free.
  void finish(Job& job) {
    job.ended = true;
    job.admission.reset();
  }

  // The token's text and bytes for logprobs: its own decoding (U+FFFD for a partial character,
  // then the raw bytes come from the vocabulary), or "token_id:N" when the request asks for ids.
  void token_text(const Job& job, int32_t id, std::string& token, Json& bytes) const {
    token = text.tokenizer->decode({id});
    if (job.request.tokens_as_ids) {
      token = "token_id:" + std::to_string(id);
      bytes = Json::array();
      for (unsigned char c : token) bytes.push_back(int(c));
      return;
    }
    std::string_view raw = token;
    if (token.find(utf8::kReplacement) != std::string::npos && text.tokenizer->bytes_per_token())
      raw = text.tokenizer->token_bytes(id);
    bytes = Json::array();
    for (unsigned char c : raw) bytes.push_back(int(c));
  }

  // Folds an event into its choice: text, counts, logprobs, the finish.
  Choice& absorb(Job& job, const ChoiceEvent& tagged) {
    Choice& choice = job.choices[size_t(tagged.index)];
    const TokenEvent& event = tagged.event;
    if (job.request.logprobs >= 0 && event.token_id >= 0) {
      std::string token;
      Json bytes;
      token_text(job, event.token_id, token, bytes);
      if (job.request.chat) {
        Json top = Json::array();
        for (const TokenLogprob& entry : event.top_logprobs) {
          std::string alternative;
          Json alternative_bytes;
          token_text(job, entry.token_id, alternative, alternative_bytes);
          top.push_back({{"token", alternative}, {"logprob", entry.logprob}, {"bytes", alternative_bytes}});
        }
        choice.logprobs["content"].push_back(
            {{"token", token}, {"logprob", event.logprob}, {"bytes", bytes}, {"top_logprobs", top}});
      } else {
        // As OpenAI: the top alternatives plus the chosen token, by text.
        Json top = Json::object();
        for (const TokenLogprob& entry : event.top_logprobs) {
          std::string alternative;
          Json unused;
          token_text(job, entry.token_id, alternative, unused);
          if (!top.contains(alternative)) top[alternative] = entry.logprob;
        }
        top[token] = event.logprob;
        choice.logprobs["tokens"].push_back(token);
        choice.logprobs["token_logprobs"].push_back(event.logprob);
        choice.logprobs["top_logprobs"].push_back(top);
        choice.logprobs["text_offset"].push_back(choice.token_chars);
        choice.token_chars += code_points(job.request.tokens_as_ids ? text.tokenizer->decode({event.token_id}) : token);
      }
    }
    choice.text += event.text;
    choice.completion_tokens = event.completion_tokens;
    // The most any event says: the count holds whether the engine sets it on every event or once.
    choice.cached_tokens = std::max(choice.cached_tokens, event.cached_tokens);
    if (event.finished) {
      choice.finished = true;
      choice.finish_reason = event.finish_reason;
      choice.error = event.error;
      choice.retryable = event.retryable;
    }
    return choice;
  }

  // Logprobs gathered since the last chunk (null when not asked), leaving the choice's list empty.
  Json take_logprobs(Job& job, Choice& choice) {
    if (job.request.logprobs < 0) return nullptr;
    Json taken = std::move(choice.logprobs);
    choice.logprobs = empty_logprobs(job.request.chat);
    return taken;
  }

  void answer(Job& job, HttpExchange& exchange) {
    Json choices = Json::array();
    for (size_t index = 0; index < job.choices.size(); ++index) {
      Choice& choice = job.choices[index];
      if (!choice.error.empty()) return fail(exchange, generation_error(choice));
      if (choice.finish_reason == FinishReason::kCancelled)
        return fail(exchange, ApiError(503, "the server is shutting down", "", "server_shutting_down"));
      Json entry = {{"index", index}};
      if (job.request.chat) {
        choice.output->feed(choice.text);
        choice.output->finish();
        entry["message"] = choice.output->message();
        entry["finish_reason"] = choice.output->finish_reason(choice.finish_reason);
      } else {
        entry["text"] = choice.text;
        entry["finish_reason"] = finish_reason_name(choice.finish_reason);
      }
      entry["logprobs"] = job.request.logprobs >= 0 ? choice.logprobs : Json(nullptr);
      choices.push_back(std::move(entry));
    }
    exchange.respond(json_response(200, Json{{"id", job.id},
                                             {"object", job.request.chat ? "chat.completion" : "text_completion"},
                                             {"created", job.created},
                                             {"model", job.model},
                                             {"choices", choices},
                                             {"usage", usage_json(job)}}));
  }

  // Writes a stream's new events as SSE chunks. Writes never wait: a client that is gone, or reads
  // too slowly, fails them, and its request is cancelled.
  void stream(const std::shared_ptr<Job>& job, const std::deque<ChoiceEvent>& events) {
    HttpExchange& exchange = *job->exchange;
    auto write = [&](const std::string& data) { return exchange.write(data); };
    auto gone = [&] {  // the client hung up
      cancel(*job);
      finish(*job);
    };
    if (!job->stream_started) {
      job->stream_started = true;
      exchange.start_stream({200, "text/event-stream", "", {{"Cache-Control", "no-cache"}}});
      if (job->request.chat)
        for (int index = 0; index < int(job->choices.size()); ++index)
          if (!write(sse(chunk_json(*job, index, "", nullptr, /*role=*/true, nullptr)))) return gone();
    }
    for (const ChoiceEvent& tagged : events) {
      Choice& choice = absorb(*job, tagged);
      const TokenEvent& event = tagged.event;
      if (event.finished && !event.error.empty()) {
        // No finish_reason: the text is not a whole answer. The error event says why, as OpenAI's
        // streams do, and [DONE] ends the stream.
        cancel(*job);  // the other choices too
        exchange.write(sse(error_body(generation_error(choice))));
        exchange.write("data: [DONE]\n\n");
        exchange.end();
        return finish(*job);
      }
      if (event.finished && event.finish_reason == FinishReason::kCancelled) {
        cancel(*job);  // the other choices too
        if (job->shutdown) end_cut_stream(*job);
        exchange.end();
        return finish(*job);
      }
      // With logprobs every token gets a chunk (its text may still be held back). A chat choice's
      // text goes through its output parser: reasoning, content and tool-call deltas.
      const bool has_logprobs = job->request.logprobs >= 0 && event.token_id >= 0;
      const Json fields = choice.output ? choice.output->feed(event.text) : Json(nullptr);
      const bool has_text = choice.output ? !fields.empty() : !event.text.empty();
      if ((has_text || has_logprobs) &&
          !write(sse(chunk_json(*job, tagged.index, event.text, nullptr, false, take_logprobs(*job, choice),
                                choice.output ? &fields : nullptr))))
        return gone();
      if (!event.finished) continue;
      if (choice.output) {
        const Json rest = choice.output->finish();
        if (!rest.empty() && !write(sse(chunk_json(*job, tagged.index, "", nullptr, false, nullptr, &rest))))
          return gone();
      }
      const std::string reason =
          choice.output ? choice.output->finish_reason(choice.finish_reason) : finish_reason_name(choice.finish_reason);
      choice.finish_sent = true;
      if (!write(sse(chunk_json(*job, tagged.index, "", reason.c_str(), false, nullptr)))) return gone();
    }
    if (!job->all_finished()) return;
    if (job->request.include_usage && !write(sse(usage_chunk(*job)))) return gone();
    if (!write("data: [DONE]\n\n")) return gone();
    exchange.end();
    finish(*job);
  }

  Json usage_chunk(const Job& job) const {
    return {{"id", job.id},
            {"object", job.request.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", job.created},
            {"model", job.model},
            {"choices", Json::array()},
            {"usage", usage_json(job)}};
  }

  // A stream the drain cut short still ends as a stream does: each open choice's finish_reason
  // ("cancelled"), the usage when asked, an error event saying why, and [DONE].
  void end_cut_stream(Job& job) {
    HttpExchange& exchange = *job.exchange;
    for (int index = 0; index < int(job.choices.size()); ++index) {
      Choice& choice = job.choices[size_t(index)];
      if (choice.finish_sent) continue;
      choice.finish_sent = true;
      exchange.write(sse(chunk_json(job, index, "", finish_reason_name(FinishReason::kCancelled), false, nullptr)));
    }
    if (job.request.include_usage) exchange.write(sse(usage_chunk(job)));
    exchange.write(sse(error_body(ApiError(503, "the server is shutting down", "", "server_shutting_down"))));
    exchange.write("data: [DONE]\n\n");
  }

  bool drain(std::chrono::milliseconds timeout, const std::function<bool()>& abort) {
    draining = true;
    const auto deadline = Clock::now() + timeout;
    std::unique_lock<std::mutex> lock(live_mutex);
    while (!live.empty() && Clock::now() < deadline && !(abort && abort()))
      live_changed.wait_for(lock, std::chrono::milliseconds(100));
    if (live.empty()) return true;
    for (const auto& job : live) {
      job->shutdown = true;
      cancel(*job);
    }
    // Cancelled requests end at the engine's next step; their handlers then close.
    live_changed.wait_for(lock, std::chrono::seconds(10), [&] { return live.empty(); });
    return false;
  }
};

Server::Server(Engine& engine, ModelTextView text, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(text), std::move(options))) {}

Server::~Server() = default;

int Server::bind() { return impl_->http->bind(); }

void Server::run() { impl_->http->run(); }

void Server::stop() { impl_->http->stop(); }

bool Server::drain(std::chrono::milliseconds timeout, const std::function<bool()>& abort) {
  return impl_->drain(timeout, abort);
}

}  // namespace vt::server
