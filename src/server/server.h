// The OpenAI-compatible HTTP server over the engine: /v1/completions, /v1/chat/completions (JSON
// or SSE streaming; n choices, logprobs, logit_bias; speculative decoding per request with the
// extension field num_speculative_tokens), /v1/models, /health, /metrics. Bearer-key
// auth on all but /health, a CORS allow-list, a cap on requests in flight (429 beyond it), and a
// drain for shutdown (new requests 503, in-flight ones finish; streams cut at its end still close
// with a finish_reason, an error event and [DONE]).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "jinja/chat_template.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"

namespace vt::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see Server::bind)
  std::string api_key;  // empty: no auth
  std::string model_name;
  size_t max_body_bytes = 1 << 20;
  // The transport's deadlines, connection cap, threads and write queue (its host, port and body
  // limit are the fields above).
  HttpServerOptions http;
  int64_t default_chat_max_tokens = 512;
  // Sampling for requests that leave temperature, top_k, top_p or min_p out (default: greedy), and
  // penalties for those that leave them out (default: none).
  SamplingParams default_sampling;
  Penalties default_penalties;
  // Origins (exact "scheme://host[:port]", or "*") whose browsers may call the API; others get no
  // CORS headers. Empty: none.
  std::vector<std::string> allowed_origins;
  int64_t max_concurrent_requests = 0;  // completions in flight at once, 429 beyond; 0: no cap
  // Speculative decoding (the engine's max_num_draft must allow it): drafts per step for requests
  // that do not set `num_speculative_tokens` (0: none), adapted to the acceptance when asked.
  int64_t num_draft = 0;
  bool adaptive_draft = false;
};

// What the server needs of the model's text side.
struct ModelTextView {
  const Tokenizer* tokenizer = nullptr;
  const jinja::ChatTemplateSet* chat_templates = nullptr;  // none or empty: chat answers 400
  std::vector<int32_t> stop_ids;  // end-of-sequence / end-of-turn ids
};

class Server {
 public:
  Server(Engine& engine, ModelTextView text, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port; returns the port bound. Throws vt::Error when it cannot.
  int bind();
  // Serves until stop() (from another thread or a signal handler's helper thread).
  void run();
  void stop();
  // Refuses new completions (503) and waits up to `timeout` (or until `abort` returns true) for
  // those in flight to finish; then cancels what is left and waits for their handlers to end.
  // True when everything finished on its own. Call stop() afterwards.
  bool drain(std::chrono::milliseconds timeout, const std::function<bool()>& abort = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vt::server
