// `vt serve`: the OpenAI-compatible HTTP server on one model.
//   vt serve --model FILE.gguf|DIR [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--device cpu|cuda]
//   vt serve --synthetic qwen3.5-27b --tokenizer DIR [--weights fp8|bf16]   (CUDA: real shapes, random weights)
//   ... [--speculative ngram|mtp [--num-draft K] [--adaptive-draft] [--speculate-by-load]]   (speculative
//       decoding in the batch; mtp: the checkpoint's MTP head drafts, on the CPU reference or one GPU;
//       by load: requests draft only where the measured step costs say it pays at the running batch)
//   ... [--device-sampling on|off]   (CUDA: tokens drawn on the GPU, the default; off for A/B runs)
//   ... [--batch-invariant]   (CUDA, no experts: a request's tokens independent of the batch; slower)
//   ... [--step-trace FILE]   (one JSON line per engine step: its times, tokens by kind and cost)
//   ... [--step-cost-context C]   (a token at context p costs 1 + p/C: deep prompt chunks shrink)
//   ... [--prompt-chunks-per-step N]   (a prompt's consecutive chunks in a step nothing decodes in;
//       default: the budget's)
//   ... [--prefix-cache on|off] [--prefix-snapshot-stride N]   (requests start from the longest saved
//       state their prompt extends; on by default)
//   ... [--chat-template FILE.jinja]   (instead of the model's own; its tool-call format is used)
// Prints "vt serve: listening on http://HOST:PORT" on stderr once it accepts connections
// (--port 0 picks a free port). SIGINT or SIGTERM drains: new requests get 503, those in flight
// finish (up to --drain-timeout seconds, then they are cancelled), and it exits 0; a second
// signal cuts the drain short. A failed model forward (a CUDA error) fails the requests running,
// /health and new requests get 503, and once the drain is over it exits 1, for a supervisor to
// restart it (--inject-fault-at-forward N makes the Nth forward fail, to test that).
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "apps/commands.h"
#include "apps/lm_head_options.h"
#include "apps/model_text.h"
#include "core/error.h"
#include "engine/cuda_serving.h"
#include "engine/engine.h"
#include "io/weight_store.h"
#include "model/faulty_model.h"
#include "model/mtp_head.h"
#include "server/server.h"
#include "speculative/mtp_drafter.h"
#ifdef VT_WITH_CUDA
#include "runtime/qwen3_5_cuda.h"
#endif
#ifdef VT_WITH_NCCL
#include "parallel/tensor_parallel_cuda_model.h"
#endif

namespace {

struct ServeArgs {
  std::string model, served_model_name, device = "cpu", synthetic, tokenizer, weights = "fp8";
  int64_t max_context = 4096;
  int tensor_parallel = 1;
  vt::server::ServerOptions server;
  vt::EngineOptions engine;
  int64_t cache_tokens = 0;  // 0: 65,536, or on CUDA at least one sequence of --max-context
  double drain_timeout_seconds = 30;
  double header_timeout_seconds = 10;
  int64_t prefill_chunk = 0, step_token_budget = 0;  // 0: the device's default
  int64_t prompt_chunks_per_step = 0;  // 0: those the step token budget holds (1 with --batch-invariant)
  std::string reservation = "on-demand";
  std::string speculative;  // "", "ngram" or "mtp"
  int64_t num_draft = 0;    // 0: not given (4 with --speculative)
  bool adaptive_draft = false;
  std::string device_sampling = "on";
  bool batch_invariant = false;
  std::string prefix_cache = "on";
  double prefix_cache_gb = 4;
  std::string chat_template;  // a .jinja file replacing the model's templates
  std::string generation_config = "auto";  // auto: the model's sampling defaults; vt: greedy
  int64_t inject_fault_at_forward = 0;  // testing: batched forwards from this one on throw
  vt::apps::LmHeadArgs lm_head;
};

// Set by SIGINT/SIGTERM on whichever thread takes the signal; a watcher thread drains and stops
// the server.
volatile std::sig_atomic_t stop_signal = 0, stop_signals = 0;
void on_stop_signal(int signal_number) {
  stop_signal = signal_number;
  stop_signals = stop_signals + 1;
}

// Every connection holds a descriptor: raises the soft limit as far as the hard one allows and keeps
// the connection cap under it (with room for the model's files and the engine), so that the cap,
// not accept() failing, is what refuses a connection.
void fit_connections_to_descriptors(vt::server::HttpServerOptions& http) {
  constexpr rlim_t kReserved = 256;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = rlim_t(http.max_connections) + kReserved;
  if (limit.rlim_cur < wanted) {
    rlimit raised = limit;
    raised.rlim_cur = std::min(wanted, limit.rlim_max);
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur < wanted) {
    const size_t fitted = limit.rlim_cur > 2 * kReserved ? size_t(limit.rlim_cur - kReserved) : size_t(limit.rlim_cur / 2);
    std::fprintf(stderr, "vt serve: %llu file descriptors allowed: --max-connections %zu lowered to %zu\n",
                 static_cast<unsigned long long>(limit.rlim_cur), http.max_connections, fitted);
    http.max_connections = fitted;
  }
}

void run_serve(ServeArgs args) {
  ::signal(SIGINT, on_stop_signal);
  ::signal(SIGTERM, on_stop_signal);
  ::signal(SIGPIPE, SIG_IGN);  // a client that hangs up is a failed write, not a dead server

  VT_CHECK(args.model.empty() != args.synthetic.empty(), "serve: give --model or --synthetic (one of them)");
  VT_CHECK(args.tensor_parallel == 1 || args.device == "cuda" || !args.synthetic.empty(),
           "serve: --tensor-parallel splits a model over GPUs: it needs --device cuda");
  VT_CHECK(args.synthetic.empty() || !args.tokenizer.empty(), "serve: --synthetic needs --tokenizer DIR");
  VT_CHECK(args.speculative.empty() || args.speculative == "ngram" || args.speculative == "mtp", "serve: --speculative '",
           args.speculative, "': the server drafts with ngram (prompt lookup) or mtp (the MTP head); draft runs in vt generate");
  VT_CHECK(args.speculative != "mtp" || args.synthetic.empty(),
           "serve: --speculative mtp drafts with a checkpoint's MTP head (--model DIR); --synthetic models have none");
  VT_CHECK(args.speculative != "mtp" || args.tensor_parallel == 1,
           "serve: --speculative mtp runs on one GPU (--tensor-parallel 1): the MTP head does not run on "
           "tensor-parallel ranks");
  VT_CHECK(!args.speculative.empty() || (args.num_draft == 0 && !args.adaptive_draft && !args.engine.speculation_by_load),
           "serve: --num-draft, --adaptive-draft and --speculate-by-load go with --speculative");
  // A step carries every decoding request's token plus prompt chunks up to the budget. On the CPU a
  // step's time grows with its tokens (a 256-token chunk deep in a long prompt takes seconds), and
  // every decoding request waits for it: small chunks keep one long prompt from stalling the rest.
  const bool on_cpu = args.device == "cpu" && args.synthetic.empty();
  // On a GPU: engine/cuda_serving.h.
  args.engine.prefill_chunk = args.prefill_chunk > 0 ? args.prefill_chunk : on_cpu ? 64 : vt::kCudaPrefillChunk;
  args.engine.step_token_budget = args.step_token_budget > 0 ? args.step_token_budget
                                  : on_cpu ? 128
                                           : vt::cuda_step_token_budget(args.engine.prefill_chunk, args.engine.max_running);
  VT_CHECK(args.engine.step_token_budget >= args.engine.prefill_chunk, "serve: --step-token-budget (",
           args.engine.step_token_budget, ") must hold one --prefill-chunk (", args.engine.prefill_chunk, ")");
  if (!args.speculative.empty()) {
    if (args.num_draft == 0) args.num_draft = 4;
    // Every running request can verify its drafts in each step.
    args.engine.max_num_draft = args.num_draft;
    args.engine.step_token_budget =
        std::max(args.engine.step_token_budget, args.engine.max_running * (1 + args.num_draft));
    args.server.num_draft = args.num_draft;
    args.server.adaptive_draft = args.adaptive_draft;
  }
  if (args.speculative == "mtp" && std::filesystem::is_directory(args.model)) {
    // Refused before the weights load (on the GPU, minutes for a large model); the loaders check too.
    VT_CHECK(vt::WeightStore::open(args.model).contains("mtp.fc.weight"), "serve: --speculative mtp: ", args.model,
             " has no MTP head (no mtp.* weights, such as mtp.fc.weight)");
  }
  const auto lm_head = vt::apps::lm_head_quantization(args.lm_head);
  auto text = vt::apps::load_model_text(args.tokenizer.empty() ? args.model : args.tokenizer);
  std::unique_ptr<vt::Model> model;
  const bool cuda = args.device == "cuda" || !args.synthetic.empty();
  VT_CHECK(!args.batch_invariant || cuda, "serve: --batch-invariant is a CUDA option (--device cuda)");
  VT_CHECK(!args.batch_invariant || args.prompt_chunks_per_step <= 1, "serve: --batch-invariant feeds a prompt one "
           "chunk a step (several would make its shapes depend on the load); --prompt-chunks-per-step ",
           args.prompt_chunks_per_step, " is refused");
  args.engine.max_prompt_chunks_per_step = args.prompt_chunks_per_step > 0
                                               ? args.prompt_chunks_per_step
                                               : vt::serving_prompt_chunks_per_step(args.engine, args.batch_invariant);
  if (args.cache_tokens == 0) args.cache_tokens = cuda ? vt::cuda_default_cache_tokens(args.max_context) : 65536;
  if (cuda) {
#ifdef VT_WITH_CUDA
    // The sizes for the engine's steps and, on one GPU, the one device pool of --cache-tokens the
    // engine admits into; a tensor-parallel model's ranks keep a pool each with room for every
    // sequence at its longest: their sequences admit themselves there, and the engine's own cache
    // admits the requests.
    vt::CudaModelOptions options =
        vt::cuda_serving_options(args.engine, args.max_context, args.cache_tokens, args.tensor_parallel == 1);
    // MTP: the head's weights, its KV cache for every slot; the target sequences keep their hidden
    // states for it (per slot at most one step's: the engine's drafters read them every step).
    options.load_mtp = args.speculative == "mtp";
    options.batch_invariant = args.batch_invariant;
    VT_CHECK(!args.batch_invariant || args.tensor_parallel == 1, "serve: --batch-invariant runs on one GPU");
    if (lm_head) {
      options.fp8_lm_head = true;
      options.lm_head_exact_columns = lm_head->exact_columns;
    }
    if (args.tensor_parallel > 1) {
#ifdef VT_WITH_NCCL
      if (args.synthetic.empty()) {
        model = vt::TensorParallelCudaModel::load(args.model, args.tensor_parallel, options);
      } else {
        VT_CHECK(args.weights == "fp8" || args.weights == "bf16", "serve: --weights fp8|bf16, got '", args.weights, "'");
        model = vt::TensorParallelCudaModel::synthetic(vt::synthetic_config(args.synthetic), args.weights == "fp8",
                                                       args.tensor_parallel, options, 1,
                                                       args.synthetic + " (synthetic, " + args.weights + ")");
      }
#else
      VT_FAIL("serve: --tensor-parallel ", args.tensor_parallel, " needs a vt built with NCCL");
#endif
    } else if (args.synthetic.empty()) {
      model = vt::load_qwen35_cuda(args.model, options);
    } else {
      model = vt::make_synthetic_cuda_model(args.synthetic, args.weights, options, 1);
    }
#else
    VT_FAIL("serve: --device cuda / --synthetic need a CUDA build of vt");
#endif
  } else {
    VT_CHECK(args.device == "cpu", "serve: --device cpu|cuda, got '", args.device, "'");
    vt::LoadOptions load_options;
    load_options.load_mtp = args.speculative == "mtp";
    model = vt::apps::load_model_with_progress(args.model, load_options);
    if (lm_head) model->quantize_lm_head_fp8(*lm_head);
  }
  if (args.speculative == "mtp") {
    // Each request's head sequence lives with its drafter; a sampled request's drafts are seeded
    // from its seed, as vt generate seeds them.
    auto* head = dynamic_cast<vt::MtpHead*>(model.get());
    VT_CHECK(head, "serve: --speculative mtp runs on the Qwen3.5 family (not ", model->info().architecture, ")");
    args.engine.make_drafter = [head](const vt::RequestParams& request) {
      vt::SamplingParams draft_sampling = request.sampling;
      draft_sampling.seed = request.sampling.seed + 1;
      return std::make_unique<vt::MtpDrafter>(*head, draft_sampling, vt::MtpHiddenSource::kSequence);
    };
  }
  std::unique_ptr<vt::Model> faulty;  // over `model`, when a fault is injected
  if (args.inject_fault_at_forward > 0) faulty = std::make_unique<vt::FaultyModel>(*model, args.inject_fault_at_forward);
  VT_CHECK(args.cache_tokens >= args.engine.block_size, "serve: --cache-tokens must be at least one block (",
           args.engine.block_size, ")");
  args.engine.cache_blocks = args.cache_tokens / args.engine.block_size;
  args.engine.reservation = args.reservation == "full" ? vt::EngineOptions::Reservation::kFull
                                                       : vt::EngineOptions::Reservation::kOnDemand;
  args.engine.admission_watermark_blocks = -1;  // 1% of the pool kept for running requests to grow
  args.engine.device_sampling = args.device_sampling == "on";
  args.engine.prefix_cache = args.prefix_cache == "on" && model->supports_prefix_cache();
  if (args.prefix_cache == "on" && !args.engine.prefix_cache)
    std::fprintf(stderr, "vt serve: prefix caching off: %s on this backend does not save sequence states\n",
                 model->info().architecture.c_str());
  args.engine.prefix_cache_bytes = int64_t(args.prefix_cache_gb * double(int64_t(1) << 30));
  {
    const auto start = std::chrono::steady_clock::now();
    model->warm_up();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds >= 0.01) std::fprintf(stderr, "vt serve: warmed up in %.1f s (decode graphs)\n", seconds);
  }
  vt::Engine engine(faulty ? *faulty : *model, text.tokenizer.get(), args.engine);

  fit_connections_to_descriptors(args.server.http);
  args.server.http.header_timeout = std::chrono::milliseconds(int64_t(args.header_timeout_seconds * 1000));
  args.server.model_name = !args.served_model_name.empty() ? args.served_model_name
                            : !args.synthetic.empty()        ? args.synthetic
                                                             : std::filesystem::path(args.model).stem().string();
  if (!args.chat_template.empty()) {
    std::ifstream in(args.chat_template, std::ios::binary);
    VT_CHECK(in, "serve: --chat-template ", args.chat_template, ": cannot open");
    std::ostringstream source;
    source << in.rdbuf();
    text.chat_templates.templates = {{"default", source.str()}};
    text.chat_templates.origin = args.chat_template;
  }
  if (args.generation_config == "auto" && text.generation.has_sampling()) {
    args.server.default_sampling = text.generation.sampling_over(args.server.default_sampling);
    if (text.generation.repetition_penalty) args.server.default_penalties.repetition = *text.generation.repetition_penalty;
    std::fprintf(stderr, "vt serve: requests that leave them out sample with the model's generation_config.json: %s "
                 "(--generation-config vt: greedy)\n", text.generation.sampling_summary().c_str());
  }
  vt::server::ModelTextView view{text.tokenizer.get(), &text.chat_templates, text.stop_ids};
  vt::server::Server server(engine, view, args.server);
  const int port = server.bind();
  std::atomic<bool> finished{false};
  std::thread watcher([&] {
    while (!stop_signal && !finished && !engine.failed()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (engine.failed() && !finished) {
      // Answers go out (the engine has failed every request), then the process ends for a restart.
      std::fprintf(stderr, "vt serve: %s; draining (up to %g s), then exiting\n", engine.failure().c_str(),
                   args.drain_timeout_seconds);
      server.drain(std::chrono::milliseconds(int64_t(args.drain_timeout_seconds * 1000)), [] { return stop_signal != 0; });
    } else if (stop_signal) {
      std::fprintf(stderr, "vt serve: signal %d, draining (up to %g s)\n", int(stop_signal), args.drain_timeout_seconds);
      const bool drained = server.drain(std::chrono::milliseconds(int64_t(args.drain_timeout_seconds * 1000)),
                                        [] { return stop_signals > 1; });
      std::fprintf(stderr, "vt serve: %s, stopping\n",
                   drained ? "all requests finished" : "requests still in flight were cancelled");
    }
    server.stop();
  });
  std::fprintf(stderr, "vt serve: %s (%lld tokens of context) listening on http://%s:%d\n",
               args.server.model_name.c_str(), static_cast<long long>(engine.max_request_tokens()),
               args.server.host.c_str(), port);
  std::fflush(stderr);
  server.run();
  finished = true;  // stopped by a signal, or the listener failed
  watcher.join();
  VT_CHECK(!engine.failed(), "serve: ", engine.failure());  // exit 1: restart me
}

}  // namespace

namespace vt::apps {

void add_serve_commands(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  auto* serve = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)");
  serve->add_option("--model", args->model, "GGUF file or HF model folder");
  serve->add_option("--device", args->device, "cpu (the reference, default) or cuda (Qwen3.5 family)");
  vt::apps::add_lm_head_options(serve, args->lm_head);
  serve->add_option("--synthetic", args->synthetic, "CUDA: qwen3.5-27b | qwen3.5-35b-a3b | qwen3-next-80b, random weights");
  serve->add_option("--weights", args->weights, "--synthetic weights: fp8 (128x128 blocks, default) or bf16");
  serve->add_option("--chat-template", args->chat_template, "a .jinja chat template instead of the model's own");
  serve->add_option("--tokenizer", args->tokenizer, "folder with tokenizer.json (default: the model's own)");
  serve->add_option("--generation-config", args->generation_config,
                    "auto (default): requests that leave temperature, top_k, top_p, min_p or repetition_penalty out "
                    "get the values of the model's generation_config.json, as vLLM does; vt: greedy")
      ->check(CLI::IsMember({"auto", "vt"}));
  serve->add_option("--tensor-parallel", args->tensor_parallel, "CUDA: GPUs to split the model over (NCCL), default 1")
      ->check(CLI::Range(1, 64));
  serve->add_option("--max-context", args->max_context, "CUDA: tokens per sequence (default 4096)")
      ->check(CLI::Range(16, 1 << 20));
  serve->add_option("--host", args->server.host, "address to bind (default 127.0.0.1: this machine only)");
  serve->add_option("--port", args->server.port, "port (0: any free port)")->check(CLI::Range(0, 65535));
  serve->add_option("--api-key", args->server.api_key, "require 'Authorization: Bearer KEY' (not on /health)");
  serve->add_option("--served-model-name", args->served_model_name, "the model's name in the API (default: file stem)");
  serve->add_option("--max-running", args->engine.max_running, "requests processed at once; more wait (default 64)")
      ->check(CLI::Range(1, 4096));
  serve->add_option("--cache-tokens", args->cache_tokens,
                    "KV cache size in tokens (default 65536; CUDA: the device's pool all requests share, "
                    "at least --max-context)")
      ->check(CLI::PositiveNumber);
  serve->add_option("--prefill-chunk", args->prefill_chunk,
                    "prompt tokens per chunk, at fixed offsets; a step feeds a request up to --prompt-chunks-per-step "
                    "of them (default 256 on CUDA, 64 on the CPU)")
      ->check(CLI::Range(1, 1 << 20));
  serve->add_option("--step-token-budget", args->step_token_budget,
                    "tokens per step: decoding requests' plus prompt chunks (default 4 chunks + --max-running on CUDA, 128 on the CPU)")
      ->check(CLI::Range(1, 1 << 20));
  serve->add_option("--prompt-chunks-per-step", args->prompt_chunks_per_step,
                    "the most consecutive --prefill-chunk chunks of one prompt a step with no decoding request "
                    "feeds, as one forward, while the step's budget holds them (default 0: as many as --step-token-budget holds, 4 on CUDA; "
                    "1 with --batch-invariant)")
      ->check(CLI::Range(0, 1 << 20));
  serve->add_option("--step-cost-context", args->engine.step_cost_context,
                    "C of the step's cost, a token at context p costing 1 + p/C: past C prompt chunks shrink so "
                    "a step costs what --step-token-budget tokens do at C (default: the model's, where a token's "
                    "attention equals the rest of its work; 0: tokens alone)")
      ->check(CLI::Range(0, 1 << 30));
  serve->add_option("--max-body-bytes", args->server.max_body_bytes, "largest request body (default 1 MiB)")
      ->check(CLI::PositiveNumber);
  serve->add_option("--threads-http", args->server.http.worker_threads,
                    "threads that parse and tokenise requests (default 8; connections do not hold one)")
      ->check(CLI::Range(1, 1024));
  serve->add_option("--max-connections", args->server.http.max_connections,
                    "open connections at once; more are refused with a 503 (default 4096)")
      ->check(CLI::Range(1, 1 << 20));
  serve->add_option("--header-timeout", args->header_timeout_seconds,
                    "seconds a connection has to send a request's headers (default 10)")
      ->check(CLI::Range(0.1, 3600.0));
  serve->add_option("--allowed-origins", args->server.allowed_origins,
                    "CORS: origins allowed to call the API from a browser, comma-separated ('*': any; default none)")
      ->delimiter(',');
  serve->add_option("--max-concurrent-requests", args->server.max_concurrent_requests,
                    "completions in flight at once; more get 429 (default 0: no cap)")
      ->check(CLI::NonNegativeNumber);
  serve->add_option("--drain-timeout", args->drain_timeout_seconds,
                    "on SIGTERM/SIGINT, seconds to let requests in flight finish (default 30)")
      ->check(CLI::NonNegativeNumber);
  serve->add_option("--kv-reservation", args->reservation,
                    "on-demand: blocks as requests grow, preempting (recompute) when they run out; "
                    "full: prompt + max_tokens reserved at admission (default on-demand)")
      ->check(CLI::IsMember({"on-demand", "full"}));
  serve->add_option("--speculative", args->speculative,
                    "speculative decoding for every request: ngram (prompt-lookup drafts) or mtp (the checkpoint's "
                    "MTP head; --device cpu or cuda, one GPU), verified in the batched step; a request may set "
                    "num_speculative_tokens, 0 to opt out");
  serve->add_option("--num-draft", args->num_draft, "--speculative: drafts verified per step, k (default 4)")
      ->check(CLI::Range(1, 32));
  serve->add_flag("--adaptive-draft", args->adaptive_draft, "--speculative: adapt k in [1, --num-draft] to the acceptance");
  serve->add_flag("--speculate-by-load", args->engine.speculation_by_load,
                  "--speculative: draft only where the measured step costs say it makes more tokens per second");
  serve->add_flag("--batch-invariant", args->batch_invariant,
                  "CUDA, one GPU, models without experts (bf16 or FP8): a request's tokens do not depend on what else runs (greedy text "
                  "under load is vt generate --batch-invariant's); slower");
  serve->add_option("--device-sampling", args->device_sampling,
                    "CUDA: on (default): tokens are drawn on the GPU and only their ids come back (requests with "
                    "logprobs, logit_bias or drafts still get their logits); off: every step's logits go to the "
                    "host, which samples (A/B runs). Seeded requests repeat on either, with other tokens")
      ->check(CLI::IsMember({"on", "off"}));
  serve->add_option("--prefix-cache", args->prefix_cache,
                    "on (default): a request starts from the longest saved state its prompt extends (an earlier "
                    "prompt's or completion's end, or a snapshot every --prefix-snapshot-stride prompt tokens), "
                    "copied back, and computes only the rest (multi-turn chats, shared system prompts); "
                    "off: every prompt is computed in full")
      ->check(CLI::IsMember({"on", "off"}));
  serve->add_option("--prefix-cache-gb", args->prefix_cache_gb,
                    "--prefix-cache: memory for saved states (GiB; host on the CPU, GPU memory on CUDA): their "
                    "snapshots and the KV blocks only they hold (blocks a running request shares are not counted), "
                    "the least recently used dropped first (default 4)")
      ->check(CLI::Range(0.0, 1e6));
  serve->add_option("--prefix-snapshot-stride", args->engine.prefix_snapshot_stride,
                    "--prefix-cache: prompt tokens between the states saved inside a long prompt (default 2048)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  serve->add_option("--step-trace", args->engine.step_trace,
                    "write one JSON line per engine step to this file: wall, forward and host ms, sequences, "
                    "prefill / decode / verify tokens");
  serve
      ->add_option("--inject-fault-at-forward", args->inject_fault_at_forward,
                   "testing: the engine's batched forwards from the Nth on throw, as after a device error")
      ->check(CLI::NonNegativeNumber)
      ->group("Testing");
  serve->callback([args] { run_serve(*args); });
}

}  // namespace vt::apps
