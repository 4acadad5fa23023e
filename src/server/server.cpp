// HTTP routes on cpp-httplib: validation, prompt building (chat template), submission to the
// engine, and the answer as one JSON body or as SSE chunks; a gone client cancels its request.
#include "server/server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <mutex>

#include "core/error.h"
#include "server/metrics.h"
#include "server/validation.h"

namespace vt::server {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// Events of one request, handed from the engine thread to the HTTP thread.
struct Channel {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<TokenEvent> events;

  void push(const TokenEvent& event) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      events.push_back(event);
    }
    ready.notify_all();
  }
  // Waits up to `timeout` for events; returns what arrived (possibly nothing).
  std::deque<TokenEvent> take(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex);
    ready.wait_for(lock, timeout, [&] { return !events.empty(); });
    std::deque<TokenEvent> taken;
    taken.swap(events);
    return taken;
  }
};

// One accepted request as the response writers see it.
struct Job {
  CompletionRequest request;
  std::string id, model;
  int64_t created = 0;
  int64_t engine_id = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::string finish_reason;
  std::shared_ptr<Channel> channel = std::make_shared<Channel>();
};

Json usage_json(const Job& job) {
  return {{"prompt_tokens", job.prompt_tokens},
          {"completion_tokens", job.completion_tokens},
          {"total_tokens", job.prompt_tokens + job.completion_tokens}};
}

// A streaming chunk with one choice (text or delta) or, with `usage`, the closing usage chunk.
Json chunk_json(const Job& job, const std::string& text, const char* finish_reason, bool role) {
  Json choice = {{"index", 0}};
  if (job.request.chat) {
    Json delta = Json::object();
    if (role) delta["role"] = "assistant";
    if (role || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason ? Json(finish_reason) : Json(nullptr);
  Json chunk = {{"id", job.id},
                {"object", job.request.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", job.created},
                {"model", job.model},
                {"choices", Json::array({choice})}};
  if (job.request.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

std::string sse(const Json& data) { return "data: " + data.dump() + "\n\n"; }

void send_json(httplib::Response& response, int status, const nlohmann::json& body) {
  response.status = status;
  response.set_content(body.dump(), "application/json");
}

}  // namespace

struct Server::Impl {
  Engine& engine;
  ModelTextView text;
  ServerOptions options;
  ValidationLimits limits;
  ServerMetrics metrics;
  httplib::Server http;
  std::atomic<int64_t> next_id{1};

  Impl(Engine& engine_, ModelTextView text_, ServerOptions options_)
      : engine(engine_), text(std::move(text_)), options(std::move(options_)) {
    VT_CHECK(text.tokenizer, "serve: the model has no tokenizer");
    limits.model_name = options.model_name;
    limits.vocab_size = engine.model().info().vocab_size;
    limits.max_total_tokens = engine.max_request_tokens();
    limits.default_chat_max_tokens = options.default_chat_max_tokens;
    routes();
  }

  void routes() {
    const int threads = options.threads;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
    http.set_payload_max_length(options.max_body_bytes);
    http.set_keep_alive_timeout(5);  // idle connections hold a worker; stop() waits for them
    http.set_pre_routing_handler([this](const httplib::Request& request, httplib::Response& response) {
      if (options.api_key.empty() || request.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
      const std::string header = request.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      const bool ok = header.compare(0, prefix.size(), prefix) == 0 &&
                      constant_time_equal(std::string_view(header).substr(prefix.size()), options.api_key);
      if (ok) return httplib::Server::HandlerResponse::Unhandled;
      fail(response, ApiError(401, "a valid API key is required (Authorization: Bearer KEY)", "", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    });
    http.set_error_handler([this](const httplib::Request&, httplib::Response& response) {
      if (!response.body.empty()) return;
      const int status = response.status;
      const std::string message = status == 413   ? "the request body exceeds " + std::to_string(options.max_body_bytes) + " bytes"
                                  : status == 404 ? "no such route"
                                                  : "the request failed with HTTP status " + std::to_string(status);
      fail(response, ApiError(status, message));
    });
    http.set_exception_handler([this](const httplib::Request&, httplib::Response& response, std::exception_ptr error) {
      std::string message = "internal error";
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& exception) {
        message = exception.what();
      } catch (...) {
      }
      fail(response, ApiError(500, message));
    });
    http.set_logger([this](const httplib::Request&, const httplib::Response& response) {
      metrics.record_response(response.status);
    });
    http.Get("/health", [](const httplib::Request&, httplib::Response& response) {
      send_json(response, 200, {{"status", "ok"}});
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& response) {
      Json model = {{"id", options.model_name}, {"object", "model"}, {"created", int64_t(std::time(nullptr))},
                    {"owned_by", "vt"}, {"max_model_len", limits.max_total_tokens}};
      send_json(response, 200, Json{{"object", "list"}, {"data", Json::array({model})}});
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
      response.set_content(metrics.render(engine.stats()), "text/plain; version=0.0.4");
    });
    http.Post("/v1/completions", [this](const httplib::Request& request, httplib::Response& response) {
      complete(request, response, /*chat=*/false);
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& request, httplib::Response& response) {
      complete(request, response, /*chat=*/true);
    });
  }

  static void fail(httplib::Response& response, const ApiError& error) {
    send_json(response, error.status, error_body(error));
  }

  std::vector<int32_t> prompt_ids(const CompletionRequest& request) {
    if (!request.chat) return request.prompt_ids.empty() ? text.tokenizer->encode(request.prompt_text) : request.prompt_ids;
    if (!text.chat_templates || text.chat_templates->templates.empty())
      throw ApiError(400, "this model has no chat template; use /v1/completions", "messages");
    jinja::ChatRequest chat;
    chat.messages = request.messages;
    chat.add_generation_prompt = true;
    std::string rendered;
    try {
      const auto& source = jinja::select_chat_template(*text.chat_templates, "", false);
      rendered = jinja::apply_chat_template(jinja::Template(source), text.chat_templates->special_tokens, chat);
    } catch (const std::exception& error) {
      throw ApiError(400, std::string("the chat template rejected these messages: ") + error.what(), "messages");
    }
    EncodeOptions encode;
    encode.add_special_tokens = false;  // the template has them
    return text.tokenizer->encode(rendered, encode);
  }

  void complete(const httplib::Request& http_request, httplib::Response& response, bool chat) {
    const auto arrival = Clock::now();
    auto job = std::make_shared<Job>();
    std::vector<int32_t> prompt;
    try {
      job->request = parse_completion_request(http_request.body, chat, limits);
      prompt = prompt_ids(job->request);
      resolve_max_tokens(job->request, int64_t(prompt.size()), limits);
    } catch (const ApiError& error) {
      fail(response, error);
      return;
    }
    job->id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    job->model = options.model_name;
    job->created = int64_t(std::time(nullptr));
    job->prompt_tokens = int64_t(prompt.size());
    RequestParams params;
    params.sampling = job->request.sampling;
    if (!job->request.seeded) params.sampling.seed = std::random_device{}();
    params.max_tokens = job->request.max_tokens;
    params.stop_token_ids = text.stop_ids;
    params.stop_strings = job->request.stop;
    auto channel = job->channel;
    auto first = std::make_shared<std::atomic<bool>>(false);
    try {
      job->engine_id = engine.submit(std::move(prompt), params, [this, channel, first, arrival](const TokenEvent& event) {
        if (event.token_id >= 0 && !first->exchange(true))
          metrics.record_time_to_first_token(std::chrono::duration<double>(Clock::now() - arrival).count());
        channel->push(event);
      });
    } catch (const Error& error) {
      fail(response, ApiError(400, error.what()));
      return;
    }
    if (job->request.stream)
      stream(job, response);
    else
      answer(*job, response);
  }

  // Folds an event into the job; true when it was the last.
  static bool absorb(Job& job, const TokenEvent& event, std::string& text_out) {
    text_out += event.text;
    job.completion_tokens = event.completion_tokens;
    if (!event.finished) return false;
    job.finish_reason = finish_reason_name(event.finish_reason);
    return true;
  }

  void answer(Job& job, httplib::Response& response) {
    std::string text_out;
    TokenEvent last;
    for (bool done = false; !done;) {
      for (const TokenEvent& event : job.channel->take(std::chrono::milliseconds(500))) {
        if (absorb(job, event, text_out)) done = true, last = event;
      }
    }
    if (!last.error.empty()) return fail(response, ApiError(500, "generation failed: " + last.error));
    if (last.finish_reason == FinishReason::kCancelled) return fail(response, ApiError(503, "the server is shutting down"));
    Json choice = {{"index", 0}};
    if (job.request.chat)
      choice["message"] = {{"role", "assistant"}, {"content", text_out}};
    else
      choice["text"] = text_out;
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = job.finish_reason;
    send_json(response, 200,
              Json{{"id", job.id},
                   {"object", job.request.chat ? "chat.completion" : "text_completion"},
                   {"created", job.created},
                   {"model", job.model},
                   {"choices", Json::array({choice})},
                   {"usage", usage_json(job)}});
  }

  void stream(const std::shared_ptr<Job>& job, httplib::Response& response) {
    auto done = std::make_shared<std::atomic<bool>>(false);
    response.set_header("Cache-Control", "no-cache");
    response.set_chunked_content_provider(
        "text/event-stream",
        [this, job, done](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& data) { return sink.write(data.data(), data.size()); };
          if (job->request.chat && !write(sse(chunk_json(*job, "", nullptr, /*role=*/true)))) {
            engine.cancel(job->engine_id);
            return false;
          }
          auto idle_since = Clock::now();
          while (true) {
            auto events = job->channel->take(std::chrono::milliseconds(500));
            if (events.empty()) {
              // A comment line now and then finds out whether a queued request's client is still there.
              if (Clock::now() - idle_since > std::chrono::seconds(2)) {
                idle_since = Clock::now();
                if (!write(": keep-alive\n\n")) {
                  engine.cancel(job->engine_id);
                  return false;
                }
              }
              continue;
            }
            idle_since = Clock::now();
            for (const TokenEvent& event : events) {
              std::string piece;
              const bool last = absorb(*job, event, piece);
              if (last && event.finish_reason == FinishReason::kCancelled) return false;
              bool ok = true;
              if (!piece.empty()) ok = write(sse(chunk_json(*job, piece, nullptr, false)));
              if (ok && last) {
                ok = write(sse(chunk_json(*job, "", job->finish_reason.c_str(), false)));
                if (ok && job->request.include_usage) {
                  Json usage = {{"id", job->id},
                                {"object", job->request.chat ? "chat.completion.chunk" : "text_completion"},
                                {"created", job->created},
                                {"model", job->model},
                                {"choices", Json::array()},
                                {"usage", usage_json(*job)}};
                  ok = write(sse(usage));
                }
                if (ok) ok = write("data: [DONE]\n\n");
                if (ok) {
                  done->store(true);
                  sink.done();
                  return true;
                }
              }
              if (!ok) {  // the client is gone
                engine.cancel(job->engine_id);
                return false;
              }
            }
          }
        },
        [this, job, done](bool) {
          if (!done->load()) engine.cancel(job->engine_id);  // unknown or finished ids are ignored
        });
  }
};

Server::Server(Engine& engine, ModelTextView text, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(text), std::move(options))) {}

Server::~Server() = default;

int Server::bind() {
  const auto& options = impl_->options;
  if (options.port == 0) {
    const int port = impl_->http.bind_to_any_port(options.host);
    VT_CHECK(port > 0, "serve: cannot bind ", options.host, " to any port");
    return port;
  }
  VT_CHECK(impl_->http.bind_to_port(options.host, options.port), "serve: cannot bind ", options.host, ":", options.port,
           " (in use, or not an address of this machine)");
  return options.port;
}

void Server::run() { impl_->http.listen_after_bind(); }

void Server::stop() { impl_->http.stop(); }

}  // namespace vt::server
