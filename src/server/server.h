// The OpenAI-compatible HTTP server over the engine: /v1/completions, /v1/chat/completions (JSON
// or SSE streaming), /v1/models, /health, /metrics. Bearer-key auth on all but /health.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace vt::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see Server::bind)
  std::string api_key;  // empty: no auth
  std::string model_name;
  size_t max_body_bytes = 1 << 20;
  int threads = 128;  // connections served at once (each stream holds one)
  int64_t default_chat_max_tokens = 512;
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vt::server
