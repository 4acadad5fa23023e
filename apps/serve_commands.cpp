// `vt serve`: the OpenAI-compatible HTTP server on one model.
//   vt serve --model FILE.gguf|DIR [--host 127.0.0.1] [--port 8000] [--api-key KEY]
// Prints "vt serve: listening on http://HOST:PORT" on stderr once it accepts connections
// (--port 0 picks a free port); SIGINT or SIGTERM stops it.
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "apps/commands.h"
#include "apps/model_text.h"
#include "core/error.h"
#include "engine/engine.h"
#include "server/server.h"

namespace {

struct ServeArgs {
  std::string model, served_model_name;
  vt::server::ServerOptions server;
  vt::EngineOptions engine;
  int64_t cache_tokens = 65536;
};

// Set by SIGINT/SIGTERM on whichever thread takes the signal; a watcher thread stops the server.
volatile std::sig_atomic_t stop_signal = 0;
void on_stop_signal(int signal_number) { stop_signal = signal_number; }

void run_serve(ServeArgs args) {
  ::signal(SIGINT, on_stop_signal);
  ::signal(SIGTERM, on_stop_signal);
  ::signal(SIGPIPE, SIG_IGN);  // a client that hangs up is a failed write, not a dead server

  auto text = vt::apps::load_model_text(args.model);
  auto model = vt::apps::load_model_with_progress(args.model);
  VT_CHECK(args.cache_tokens >= args.engine.block_size, "serve: --cache-tokens must be at least one block (",
           args.engine.block_size, ")");
  args.engine.cache_blocks = args.cache_tokens / args.engine.block_size;
  vt::Engine engine(*model, text.tokenizer.get(), args.engine);

  args.server.model_name = args.served_model_name.empty() ? std::filesystem::path(args.model).stem().string()
                                                          : args.served_model_name;
  vt::server::ModelTextView view{text.tokenizer.get(), &text.chat_templates, text.stop_ids};
  vt::server::Server server(engine, view, args.server);
  const int port = server.bind();
  std::atomic<bool> finished{false};
  std::thread watcher([&] {
    while (!stop_signal && !finished) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (stop_signal) std::fprintf(stderr, "vt serve: signal %d, stopping\n", int(stop_signal));
    server.stop();
  });
  std::fprintf(stderr, "vt serve: %s (%lld tokens of context) listening on http://%s:%d\n",
               args.server.model_name.c_str(), static_cast<long long>(engine.max_request_tokens()),
               args.server.host.c_str(), port);
  std::fflush(stderr);
  server.run();
  finished = true;  // stopped by a signal, or the listener failed
  watcher.join();
}

}  // namespace

namespace vt::apps {

void add_serve_commands(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  auto* serve = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)");
  serve->add_option("--model", args->model, "GGUF file or HF model folder")->required();
  serve->add_option("--host", args->server.host, "address to bind (default 127.0.0.1: this machine only)");
  serve->add_option("--port", args->server.port, "port (0: any free port)")->check(CLI::Range(0, 65535));
  serve->add_option("--api-key", args->server.api_key, "require 'Authorization: Bearer KEY' (not on /health)");
  serve->add_option("--served-model-name", args->served_model_name, "the model's name in the API (default: file stem)");
  serve->add_option("--max-running", args->engine.max_running, "requests processed at once; more wait (default 64)")
      ->check(CLI::Range(1, 4096));
  serve->add_option("--cache-tokens", args->cache_tokens, "KV cache size in tokens (default 65536)")
      ->check(CLI::PositiveNumber);
  serve->add_option("--max-body-bytes", args->server.max_body_bytes, "largest request body (default 1 MiB)")
      ->check(CLI::PositiveNumber);
  serve->add_option("--threads-http", args->server.threads, "HTTP worker threads (default 128)")->check(CLI::Range(2, 4096));
  serve->callback([args] { run_serve(*args); });
}

}  // namespace vt::apps
