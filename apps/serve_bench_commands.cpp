// `vt bench serve`: an OpenAI-API load generator for `vt serve` (or any compatible server):
// streaming requests from a fixed number of concurrent clients (optionally paced to a Poisson
// request rate, or a sweep of rates up to a TPOT bound), from workloads made of real text in the
// repository, some hung up on mid-stream; reports requests by outcome, TTFT, TPOT, ITL, throughput
// and goodput per concurrency and workload, and checks that the server's running and waiting
// requests and KV blocks return to 0 after the load (the command fails if not); speculative
// decoding's accepted drafts per step (mean, histogram) and acceptance by draft position per run
// when the server reports them; prefix-cache hits per run, and for the multiturn workload by turn,
// with the cache on and off side by side when the in-process server runs both.
//   vt bench serve (--url http://HOST:PORT | --model FILE.gguf|DIR) [--concurrency 1,16,64]
//                  [--workload chat,edit,agent,multiturn] [--requests N | --duration S]
//                  [--request-rate R] [--cancel-fraction F] [--speculative ngram [--num-draft K]]
//                  [--sweep 1,2,4|ladder --tpot-p99-ms B [--ttft-ms T] [--sweep-steps N]]
//                  [--turns T --system-tokens N --user-tokens N --think-time S]
//                  [--prefix-cache on,off] [--temperature T] [--top-k K] [--top-p P] [--json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "apps/commands.h"
#include "apps/model_text.h"
#include "apps/serve_bench.h"
#include "core/error.h"
#include "engine/engine.h"
#include "server/server.h"

namespace vt::apps::serve_bench {
namespace {

// ms per decode step at `batch`, interpolated linearly between the given batches (the nearest
// outside them); 0 when none is given.
double decode_step_ms_at(const std::map<int64_t, double>& steps, int64_t batch) {
  if (steps.empty()) return 0;
  const auto above = steps.lower_bound(batch);
  if (above == steps.end()) return std::prev(above)->second;
  if (above->first == batch || above == steps.begin()) return above->second;
  const auto below = std::prev(above);
  const double t = double(batch - below->first) / double(above->first - below->first);
  return below->second + t * (above->second - below->second);
}

std::map<int64_t, double> parse_decode_steps(const std::string& text) {
  std::map<int64_t, double> steps;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    const size_t colon = item.find(':');
    VT_CHECK(colon != std::string::npos, "--decode-step-ms: '", item, "' is not BATCH:MS");
    const int64_t batch = std::stoll(item.substr(0, colon));
    const double ms = std::stod(item.substr(colon + 1));
    VT_CHECK(batch >= 1 && ms > 0, "--decode-step-ms: '", item, "' needs a batch >= 1 and ms > 0");
    steps[batch] = ms;
  }
  return steps;
}

// What the run would take at the engine's own rates: its prompt tokens at the prefill rate and
// its output tokens' decode steps (one token per client per step) at the step time for that many
// clients; and the server's engine steps over the run (/metrics): their count, wall time, the
// part in the model's forwards and on the host.
void add_engine_bound(Json& summary, const ServeBenchArgs& args, const std::map<int64_t, double>& steps,
                      const std::map<std::string, double>& before, const std::map<std::string, double>& after) {
  const auto delta = [&](const char* name) {
    const auto found = after.find(name);
    if (found == after.end()) return 0.0;
    const auto old = before.find(name);
    return found->second - (old == before.end() ? 0.0 : old->second);
  };
  summary["engine_steps"] = {{"count", delta("vt_engine_step_duration_seconds_count")},
                             {"wall_s", delta("vt_engine_step_duration_seconds_sum")},
                             {"forward_s", delta("vt_engine_step_forward_seconds_total")},
                             {"host_s", delta("vt_engine_step_host_seconds_total")}};
  const int64_t clients = summary["concurrency"].get<int64_t>();
  const double step_ms = decode_step_ms_at(steps, clients);
  if (args.prefill_rate <= 0 || step_ms <= 0) return;
  const double bound = double(summary["prompt_tokens"].get<int64_t>()) / args.prefill_rate +
                       double(summary["output_tokens"].get<int64_t>()) / double(clients) * step_ms / 1e3;
  summary["engine_bound_s"] = std::round(bound * 100) / 100;
  summary["efficiency"] = std::round(bound / summary["seconds"].get<double>() * 1000) / 1000;
}

// Paragraphs of real prose and code from the repository (docs, README), the workloads' material.
std::vector<std::string> load_corpus(const ServeBenchArgs& args) {
  std::vector<std::string> files;
  if (!args.corpus.empty()) {
    std::stringstream list(args.corpus);
    for (std::string item; std::getline(list, item, ',');) files.push_back(item);
  } else {
    // Run from the repository root, or name files with --corpus.
    VT_CHECK(
        std::filesystem::is_directory("docs") && std::filesystem::exists("README.md"),
        "bench serve: no README.md and docs/ here; run from the repository root or give --corpus");
    files.push_back("README.md");
    for (const auto& entry : std::filesystem::recursive_directory_iterator("docs"))
      if (entry.path().extension() == ".md") files.push_back(entry.path().string());
    std::sort(files.begin() + 1, files.end());
  }
  std::vector<std::string> paragraphs;
  for (const std::string& file : files) {
    std::ifstream in(file);
    VT_CHECK(in, "bench serve: cannot read ", file);
    std::string line, paragraph;
    auto flush = [&] {
      if (paragraph.size() >= 200) paragraphs.push_back(paragraph);
      paragraph.clear();
    };
    while (std::getline(in, line)) {
      if (line.empty())
        flush();
      else
        paragraph += (paragraph.empty() ? "" : "\n") + line;
    }
    flush();
  }
  VT_CHECK(paragraphs.size() >= 4, "bench serve: the corpus has too little text (",
           paragraphs.size(), " paragraphs)");
  return paragraphs;
}

// One request of a workload: chat messages and how many tokens to ask for.
struct Turn {
  Json messages;
  int64_t max_tokens = 0;
};

// chat: a paragraph and a question. edit: a long passage (several paragraphs) to rewrite in full,
// so the output repeats much of the prompt. agent: the first turn of a session whose context grows
// with each answer (run_point adds the rest as it runs; multiturn sessions are built in
// serve_bench_multiturn.cpp).
Turn make_turn(const std::string& workload, const std::vector<std::string>& corpus, uint64_t index,
               const ServeBenchArgs& args) {
  Turn turn;
  const std::string& paragraph = corpus[index % corpus.size()];
  if (workload == "chat") {
    turn.messages = Json::array(
        {{{"role", "user"}, {"content", paragraph + "\n\nWhat is the main point of this text?"}}});
    turn.max_tokens = args.chat_tokens;
  } else if (workload == "edit") {
    std::string passage;
    for (uint64_t i = 0; i < uint64_t(args.edit_paragraphs); ++i)
      passage += corpus[(index + i) % corpus.size()] + "\n\n";
    turn.messages =
        Json::array({{{"role", "system"}, {"content", "You are a careful copy editor."}},
                     {{"role", "user"},
                      {"content", "Fix any typos in the text below and return the whole text:\n\n" +
                                      passage}}});
    turn.max_tokens = args.edit_tokens;
  } else {
    turn.messages =
        Json::array({{{"role", "system"},
                      {"content", "You are an agent that reads documents and answers briefly."}},
                     {{"role", "user"}, {"content", "Read this:\n" + paragraph}}});
    turn.max_tokens = args.agent_tokens;
  }
  return turn;
}

// What a run did to the server's speculative-decoding counters (the difference of two /metrics
// readings): null when the server reports none.
Json speculative_delta(const std::map<std::string, double>& before, const std::map<std::string, double>& after) {
  if (!after.count("vt_spec_decode_steps_total")) return nullptr;
  auto delta = [&](const std::string& name) {
    const auto found = after.find(name);
    if (found == after.end()) return -1.0;
    const auto old = before.find(name);
    return found->second - (old == before.end() ? 0.0 : old->second);
  };
  const double steps = delta("vt_spec_decode_steps_total"), drafted = delta("vt_spec_draft_tokens_total"),
               accepted = delta("vt_spec_accepted_tokens_total"), emitted = delta("vt_spec_emitted_tokens_total");
  auto ratio = [](double a, double b) { return b > 0 ? std::round(a / b * 1000) / 1000 : 0.0; };
  Json histogram = Json::array(), by_position = Json::array();
  double below = 0;
  for (int64_t bucket = 0;; ++bucket) {  // cumulative buckets -> steps that accepted exactly `bucket`
    const double cumulative =
        delta("vt_spec_accepted_tokens_per_step_bucket{le=\"" + std::to_string(bucket) + "\"}");
    if (cumulative < 0) break;
    histogram.push_back(int64_t(std::llround(cumulative - below)));
    below = cumulative;
  }
  for (int64_t position = 0;; ++position) {
    const std::string label = "{position=\"" + std::to_string(position) + "\"}";
    const double at = delta("vt_spec_position_drafted_total" + label);
    if (at < 0) break;
    by_position.push_back(ratio(delta("vt_spec_position_accepted_total" + label), at));
  }
  return {{"steps", int64_t(steps)},
          {"drafted", int64_t(drafted)},
          {"accepted", int64_t(accepted)},
          {"emitted", int64_t(emitted)},
          {"accepted_per_step", ratio(accepted, steps)},
          {"tokens_per_step", ratio(emitted, steps)},
          {"acceptance_rate", ratio(accepted, drafted)},
          {"accepted_histogram", histogram},
          {"acceptance_by_position", by_position}};
}

// splitmix64's finaliser: a well-mixed 64-bit value from any input.
uint64_t mix(uint64_t value) {
  value += 0x9e3779b97f4a7c15ull;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ull;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebull;
  return value ^ (value >> 31);
}

// The server's prefix-cache counters over a run (tokens looked up and found, as vLLM counts them)
// and its saved states' memory after it. `setting`: on, off, or "server" (as a --url server was
// started).
Json prefix_cache_delta(const std::string& setting, const std::map<std::string, double>& before,
                        const std::map<std::string, double>& after) {
  const auto delta = [&](const char* name) {
    return metric_sum(after, name) - metric_sum(before, name);
  };
  return {{"setting", setting},
          {"queries", delta("vllm:prefix_cache_queries_total")},
          {"hits", delta("vllm:prefix_cache_hits_total")},
          {"snapshot_bytes", metric_sum(after, "vt_prefix_cache_snapshot_bytes")},
          {"blocks", metric_sum(after, "vt_prefix_cache_blocks")}};
}

// `concurrency` clients issue requests (agent, multiturn: sessions) until the count or the
// duration is reached; with a rate, each request also waits for its Poisson arrival time.
RunResult run_point(const ApiClient& client, const std::string& model, const std::string& workload,
                    int64_t concurrency, const std::vector<std::string>& corpus,
                    const ServeBenchArgs& args) {
  const bool multiturn = workload == "multiturn";
  const int64_t total = args.duration > 0   ? INT64_MAX
                        : args.requests > 0 ? args.requests
                        : multiturn         ? concurrency  // one session per client
                                            : std::max<int64_t>(8, 2 * concurrency);
  const std::string system_prompt =
      multiturn ? multiturn_system_prompt(corpus, args.system_tokens) : "";
  std::vector<double> arrivals;  // seconds from the start, for --request-rate
  std::mt19937_64 rng(args.seed);
  std::atomic<int64_t> next{0};
  std::mutex mutex;
  RunResult run;
  run.workload = workload;
  run.concurrency = concurrency;
  run.request_rate = args.request_rate;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(args.duration));
  auto arrival_of = [&](int64_t index) {  // lazily extended, under mutex
    std::exponential_distribution<double> gap(args.request_rate);
    while (int64_t(arrivals.size()) <= index)
      arrivals.push_back((arrivals.empty() ? 0 : arrivals.back()) + gap(rng));
    return arrivals[size_t(index)];
  };
  // Hung up: the requests whose golden-ratio point, from an offset the seed picks, falls below the
  // fraction (evenly spread, so any stretch of requests holds about that fraction), each after
  // 1-8 content chunks, also from the seed.
  const double cancel_offset = double(mix(args.seed) >> 11) * 0x1p-53;
  auto cancel_after_of = [&](int64_t index) -> int64_t {
    if (args.cancel_fraction <= 0 ||
        std::fmod(cancel_offset + double(index) * 0.6180339887498949, 1.0) >= args.cancel_fraction)
      return 0;
    return 1 + int64_t(mix(args.seed ^ mix(uint64_t(index))) % 8);
  };
  auto worker = [&](int64_t client_index) {
    for (bool first = true;; first = false) {
      const int64_t index = next++;
      if (index >= total || (args.duration > 0 && Clock::now() >= deadline)) return;
      if (args.request_rate > 0) {
        double at;
        {
          std::lock_guard<std::mutex> lock(mutex);
          at = arrival_of(index);
        }
        std::this_thread::sleep_until(
            start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at)));
      } else if (multiturn && first && args.think_time > 0) {
        // Sessions begin spread over one think time, as users arrive, not all in one instant.
        std::mt19937_64 start_rng(args.seed * 1000003 + uint64_t(client_index));
        std::this_thread::sleep_for(std::chrono::duration<double>(
            std::uniform_real_distribution<double>(0, args.think_time)(start_rng)));
      }
      const int64_t cancel_after = cancel_after_of(index);
      const uint64_t key = args.seed * 7919 + uint64_t(index);
      std::vector<Sample> samples;
      if (multiturn) {
        samples =
            run_multiturn_session(client, model, corpus, system_prompt, key, cancel_after, args);
      } else if (workload != "agent") {
        const Turn turn = make_turn(workload, corpus, key, args);
        samples.push_back(client.chat(model, turn.messages, turn.max_tokens, cancel_after));
      } else {
        // One session: each answer joins the context of the next turn.
        Turn turn = make_turn(workload, corpus, key, args);
        for (int64_t step = 0; step < args.agent_turns; ++step) {
          samples.push_back(client.chat(model, turn.messages, turn.max_tokens,
                                        step + 1 == args.agent_turns ? cancel_after : 0));
          const Sample& answer = samples.back();
          if (answer.status != 200 || answer.cancelled) break;
          turn.messages.push_back(
              {{"role", "assistant"}, {"content", answer.reasoning + answer.content}});
          turn.messages.push_back(
              {{"role", "user"},
               {"content",
                "Now relate it to this:\n" +
                    corpus[(uint64_t(index) * 31 + uint64_t(step) + 1) % corpus.size()]}});
        }
      }
      std::lock_guard<std::mutex> lock(mutex);
      for (Sample& sample : samples) run.samples.push_back(std::move(sample));
    }
  };
  std::vector<std::thread> threads;
  for (int64_t i = 0; i < concurrency; ++i) threads.emplace_back(worker, i);
  for (auto& thread : threads) thread.join();
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return run;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');)
    if (!item.empty()) items.push_back(item);
  return items;
}

// vt serve in this process on a free port of the loopback, over an already loaded model; stopped
// when it goes out of scope (also on errors), its engine with it.
class LocalServer {
 public:
  // `prefix_cache`: "on", "off", or "" for the engine's default.
  LocalServer(Model& model, const ModelText& text, const ServeBenchArgs& args,
              const std::string& prefix_cache) {
    EngineOptions options;
    options.max_running = args.max_running;
    options.cache_blocks = args.cache_tokens / options.block_size;
    options.admission_watermark_blocks = -1;
    VT_CHECK(args.speculative.empty() || args.speculative == "ngram",
             "bench serve: --speculative '", args.speculative,
             "': the server drafts with ngram only");
    if (!args.speculative.empty()) {
      options.max_num_draft = args.num_draft;
      options.step_token_budget =
          std::max(options.step_token_budget, options.max_running * (1 + args.num_draft));
    }
    // A prompt's consecutive chunks in a step: vt serve's default rule (--prompt-chunks-per-step 0).
    options.max_prompt_chunks_per_step = serving_prompt_chunks_per_step(options, /*batch_invariant=*/false);
    if (!prefix_cache.empty()) options.prefix_cache = prefix_cache == "on";
    if (args.prefix_snapshot_stride > 0)
      options.prefix_snapshot_stride = args.prefix_snapshot_stride;
    setting_ = options.prefix_cache ? "on" : "off";
    engine_ = std::make_unique<Engine>(model, text.tokenizer.get(), options);
    server::ServerOptions server_options;
    server_options.num_draft = options.max_num_draft;
    server_options.port = 0;
    server_options.model_name = "bench";
    server_options.api_key = args.api_key;
    server::ModelTextView view{text.tokenizer.get(), &text.chat_templates, text.stop_ids};
    server_ = std::make_unique<server::Server>(*engine_, view, server_options);
    url_ = "http://127.0.0.1:" + std::to_string(server_->bind());
    thread_ = std::thread([this] { server_->run(); });
  }
  ~LocalServer() {
    server_->stop();
    thread_.join();
  }
  LocalServer(const LocalServer&) = delete;
  LocalServer& operator=(const LocalServer&) = delete;

  const std::string& url() const { return url_; }
  const std::string& prefix_cache() const { return setting_; }  // on or off

 private:
  std::unique_ptr<Engine> engine_;  // outlives server_
  std::unique_ptr<server::Server> server_;
  std::thread thread_;
  std::string url_, setting_;
};

// What the server holds once the load is gone: its running and waiting requests, KV blocks, state
// slots and completions in flight are read until all are 0 or `timeout` seconds pass (a hung-up
// request leaves at the engine's next step), then its response counts.
Json server_after_load(const ApiClient& client, double timeout) {
  const auto start = Clock::now();
  std::map<std::string, double> values;
  Json gauges;
  bool settled = false;
  double waited = 0;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(waited > 0 ? 250 : 100));
    values = client.metrics();
    gauges = idle_gauges(values);
    settled = gauges_at_zero(gauges);
    waited = std::chrono::duration<double>(Clock::now() - start).count();
  } while (!settled && waited < timeout);
  Json after = Json::object();
  for (const char* name :
       {"vt_requests_running", "vt_requests_waiting", "vt_kv_blocks_used", "vt_prefix_cache_blocks",
        "vt_state_slots_used", "vt_preemptions_total", "vt_requests_cancelled_total", "vt_http_requests_in_flight"})
    if (values.count(name)) after[name] = values.at(name);
  Json responses = Json::object();
  for (const auto& [name, value] : values)
    if (name.rfind("vt_http_responses_total{code=\"", 0) == 0)
      responses[name.substr(30, 3)] = value;
  after["http_responses"] = responses;
  after["gauges"] = gauges;
  after["back_to_zero"] = settled;
  after["settle_seconds"] = std::round(waited * 100) / 100;
  return after;
}

void print_settled(const Json& after) {
  const Json& gauges = after["gauges"];
  std::string values;
  for (const auto& [name, value] : gauges.items())
    if (!value.is_null()) values += (values.empty() ? "" : ", ") + name + " " + value.dump();
  if (values.empty()) {
    std::printf("server after the load: no running/waiting/KV gauges in /metrics, not checked\n");
  } else if (after["back_to_zero"].get<bool>()) {
    std::printf("server idle after the load: %s (within %.2f s)\n", values.c_str(),
                after["settle_seconds"].get<double>());
  } else {
    std::printf("server NOT idle %.2f s after the load: %s\n", after["settle_seconds"].get<double>(),
                values.c_str());
  }
}

void run_bench_serve(const ServeBenchArgs& args) {
  VT_CHECK(args.url.empty() != args.model.empty(),
           "bench serve: give --url (a running server) or --model (start one here)");
  VT_CHECK(args.speculative.empty() || !args.model.empty(),
           "bench serve: --speculative configures the in-process server (--model); a server at --url speculates "
           "as it was started (vt serve --speculative ngram)");
  VT_CHECK(args.prefix_cache.empty() || !args.model.empty(),
           "bench serve: --prefix-cache configures the in-process server (--model); a server at "
           "--url caches as it was started (vt serve --prefix-cache on|off)");
  VT_CHECK(args.sweep.empty() || args.tpot_p99_ms > 0,
           "bench serve: --sweep needs --tpot-p99-ms, the bound that ends it");
  std::vector<int64_t> concurrency;
  for (const std::string& item : split(args.concurrency)) {
    int64_t value = 0;
    try {
      value = std::stoll(item);
    } catch (const std::exception&) {
      VT_FAIL("--concurrency: '", item, "' is not an integer");
    }
    VT_CHECK(value >= 1 && value <= 1024, "--concurrency: ", value, " out of range [1, 1024]");
    concurrency.push_back(value);
  }
  const std::vector<std::string> workloads = split(args.workloads);
  VT_CHECK(!concurrency.empty() && !workloads.empty(),
           "bench serve: empty --concurrency or --workload");
  for (const std::string& workload : workloads)
    VT_CHECK(
        workload == "chat" || workload == "edit" || workload == "agent" || workload == "multiturn",
        "--workload: '", workload, "' is not chat, edit, agent or multiturn");
  // One server per prefix-cache setting: "server" is one at --url, as it was started; "" the
  // in-process engine's default.
  std::vector<std::string> settings = {args.model.empty() ? "server" : ""};
  if (!args.prefix_cache.empty()) {
    settings = split(args.prefix_cache);
    VT_CHECK(!settings.empty(), "bench serve: empty --prefix-cache");
    for (const std::string& setting : settings)
      VT_CHECK(setting == "on" || setting == "off", "--prefix-cache: '", setting,
               "' is not on or off");
  }
  const auto corpus = load_corpus(args);

  std::unique_ptr<ModelText> text;
  std::unique_ptr<Model> model;
  if (!args.model.empty()) {
    text = std::make_unique<ModelText>(load_model_text(args.model));
    model = load_model_with_progress(args.model);
  }
  Json sampling = {{"temperature", args.temperature}, {"top_p", args.top_p}};
  if (args.top_k > 0) sampling["top_k"] = args.top_k;
  const std::map<int64_t, double> decode_steps = parse_decode_steps(args.decode_step_ms);
  // One run per concurrency, or a sweep's rates at each.
  const std::vector<double> rates =
      args.sweep.empty() ? std::vector<double>{args.request_rate}
                         : sweep_rates(args.sweep, args.request_rate > 0 ? args.request_rate : 1, args.sweep_steps);
  Json runs = Json::array(), servers = Json::array(), sweeps = Json::array();
  bool idle = true;  // every server back to 0 after its load
  std::string url, model_name;
  for (const std::string& setting : settings) {
    std::optional<LocalServer> local;
    std::string label = "server";
    url = args.url;
    if (model) {
      local.emplace(*model, *text, args, setting);
      url = local->url();
      label = local->prefix_cache();
    }
    ApiClient client(url, args.api_key, sampling);
    model_name = args.served_model_name;
    if (model_name.empty())
      model_name = client.get_json("/v1/models")["data"][0]["id"].get<std::string>();
    if (!args.json) {
      if (settings.size() > 1)
        std::printf("%sprefix cache %s:\n", servers.empty() ? "" : "\n", label.c_str());
      print_header(!args.sweep.empty());
    }
    for (const std::string& workload : workloads) {
      for (int64_t clients : concurrency) {
        Json ladder = Json::array();  // a sweep's rates, each with its goodput and bound
        for (double rate : rates) {
          ServeBenchArgs point = args;
          point.request_rate = rate;
          const auto metrics_before = client.metrics();
          const RunResult run = run_point(client, model_name, workload, clients, corpus, point);
          Json summary = summarize(run, args.ttft_ms, args.tpot_p99_ms);
          const auto metrics_after = client.metrics();
          const Json speculative = speculative_delta(metrics_before, metrics_after);
          add_engine_bound(summary, args, decode_steps, metrics_before, metrics_after);
          if (!speculative.is_null()) summary["speculative"] = speculative;
          summary["prefix_cache"] = prefix_cache_delta(label, metrics_before, metrics_after);
          if (workload == "multiturn") summary["multiturn"] = summarize_multiturn(run.samples, args);
          if (!args.json) print_run(summary);
          std::fflush(stdout);
          runs.push_back(summary);
          if (args.sweep.empty()) continue;
          const bool within = within_tpot_bound(summary, args.tpot_p99_ms);
          ladder.push_back({{"request_rate", rate},
                            {"within_bound", within},
                            {"goodput_rps", summary["goodput"]["requests_per_second"]},
                            {"requests_per_second", summary["requests_per_second"]},
                            {"ttft_ms", summary["ttft_ms"]},
                            {"tpot_ms", summary["tpot_ms"]},
                            {"itl_ms", summary["itl_ms"]}});
          if (!within) break;  // past the bound: higher rates only queue more
        }
        if (!args.sweep.empty()) sweeps.push_back(sweep_result(workload, clients, ladder, args));
      }
    }
    const Json after = server_after_load(client, args.settle_timeout);
    servers.push_back({{"prefix_cache", label}, {"url", url}, {"server_after", after}});
    if (!args.json) {
      std::printf("server after the load: %s\n", after.dump().c_str());
      print_settled(after);
    }
    idle &= after["back_to_zero"].get<bool>();
  }
  const Json comparison = compare_prefix_cache(runs, args.json);
  if (!args.json)
    for (const Json& sweep : sweeps) print_sweep(sweep);
  if (args.json) {
    Json report = {{"url", url},
                   {"model", model_name},
                   {"sampling", sampling},
                   {"runs", runs},
                   {"server_after", servers.back()["server_after"]},
                   {"servers", servers},
                   {"prefix_cache_comparison", comparison}};
    if (!args.sweep.empty()) report["sweeps"] = sweeps;
    std::printf("%s\n", report.dump(2).c_str());
  }
  std::fflush(stdout);
  VT_CHECK(idle, "bench serve: the server still held requests or KV blocks ", args.settle_timeout,
           " s after the load (server_after)");
}

}  // namespace
}  // namespace vt::apps::serve_bench

namespace vt::apps {

void add_serve_bench_commands(CLI::App& app) {
  CLI::App* bench = nullptr;
  for (CLI::App* command :
       app.get_subcommands([](CLI::App* command) { return command->get_name() == "bench"; }))
    bench = command;
  if (!bench) {
    bench = app.add_subcommand("bench", "Benchmarks");
    bench->require_subcommand(1);
  }
  auto args = std::make_shared<serve_bench::ServeBenchArgs>();
  auto* serve = bench->add_subcommand(
      "serve", "Load an OpenAI-compatible server: TTFT, TPOT, ITL, throughput");
  serve->add_option("--url", args->url, "a running server, e.g. http://127.0.0.1:8000");
  serve->add_option("--model", args->model,
                    "or start vt serve in this process on this model (GGUF file or HF folder)");
  serve->add_option("--api-key", args->api_key, "Bearer key for the server");
  serve->add_option("--served-model-name", args->served_model_name,
                    "model name in requests (default: /v1/models)");
  serve->add_option("--concurrency", args->concurrency,
                    "concurrent clients, comma-separated (default 1,16,64)");
  serve->add_option("--workload", args->workloads,
                    "chat, edit, agent, multiturn, comma-separated (default chat,edit,agent)");
  serve->add_option("--corpus", args->corpus,
                    "text files for the prompts, comma-separated (default README.md, docs/*.md)");
  serve
      ->add_option("--requests", args->requests,
                   "requests (agent, multiturn: sessions) per run (default 2 x concurrency, >= 8; "
                   "multiturn: one session per client)")
      ->check(CLI::PositiveNumber);
  serve->add_option("--duration", args->duration, "seconds per run instead of a request count")
      ->check(CLI::PositiveNumber);
  serve
      ->add_option("--request-rate", args->request_rate,
                   "Poisson arrivals per second (default: back to back)")
      ->check(CLI::NonNegativeNumber);
  serve
      ->add_option("--cancel-fraction", args->cancel_fraction,
                   "fraction of requests the client hangs up on after 1-8 tokens (chosen from --seed), "
                   "counted as cancelled")
      ->check(CLI::Range(0.0, 1.0));
  serve->add_option("--sweep", args->sweep,
                    "request rates to run in turn, e.g. 0.5,1,2,4, or 'ladder' (--request-rate doubled); "
                    "stops after the first whose TPOT p99 exceeds --tpot-p99-ms");
  serve->add_option("--sweep-steps", args->sweep_steps, "--sweep ladder: rates at most (default 8)")
      ->check(CLI::Range(1, 64));
  serve
      ->add_option("--tpot-p99-ms", args->tpot_p99_ms,
                   "--sweep's bound on TPOT p99; also each request's TPOT bound for goodput")
      ->check(CLI::NonNegativeNumber);
  serve->add_option("--ttft-ms", args->ttft_ms, "each request's TTFT bound for goodput (default 0: none)")
      ->check(CLI::NonNegativeNumber);
  serve
      ->add_option("--settle-timeout", args->settle_timeout,
                   "seconds for the server's running, waiting and KV blocks to return to 0 after the load "
                   "(default 10), else the command fails")
      ->check(CLI::NonNegativeNumber);
  serve->add_option("--chat-tokens", args->chat_tokens, "max_tokens of a chat request (default 64)")
      ->check(CLI::PositiveNumber);
  serve
      ->add_option("--edit-tokens", args->edit_tokens,
                   "max_tokens of an edit request (default 256)")
      ->check(CLI::PositiveNumber);
  serve
      ->add_option("--edit-paragraphs", args->edit_paragraphs,
                   "paragraphs in an edit prompt (default 4)")
      ->check(CLI::PositiveNumber);
  serve->add_option("--agent-turns", args->agent_turns, "turns per agent session (default 4)")
      ->check(CLI::PositiveNumber);
  serve
      ->add_option("--agent-tokens", args->agent_tokens, "max_tokens of an agent turn (default 48)")
      ->check(CLI::PositiveNumber);
  serve->add_option("--turns", args->turns, "turns per multiturn session (default 4)")
      ->check(CLI::PositiveNumber);
  serve
      ->add_option("--system-tokens", args->system_tokens,
                   "multiturn: the system prompt every session shares, about this many tokens "
                   "(default 3000)")
      ->check(CLI::PositiveNumber);
  serve
      ->add_option("--user-tokens", args->user_tokens,
                   "multiturn: new text in each user message, about this many tokens (default 256)")
      ->check(CLI::PositiveNumber);
  serve
      ->add_option("--multiturn-tokens", args->multiturn_tokens,
                   "max_tokens of a multiturn turn (default 128)")
      ->check(CLI::PositiveNumber);
  serve
      ->add_option(
          "--think-time", args->think_time,
          "multiturn: seconds a client waits between its turns, 0.5-1.5 times this (default 1)")
      ->check(CLI::NonNegativeNumber);
  serve
      ->add_option("--cache-tokens", args->cache_tokens,
                   "--model: KV cache size in tokens (default 65536)")
      ->check(CLI::PositiveNumber);
  serve
      ->add_option("--max-running", args->max_running,
                   "--model: requests processed at once (default 64)")
      ->check(CLI::Range(1, 4096));
  serve->add_option("--speculative", args->speculative,
                    "--model: the in-process server speculates with ngram drafts for every request");
  serve->add_option("--num-draft", args->num_draft, "--model --speculative: drafts per step (default 4)")
      ->check(CLI::Range(1, 32));
  serve->add_option(
      "--prefix-cache", args->prefix_cache,
      "--model: the in-process server's prefix cache, on, off or on,off (a fresh server for each, "
      "run after run; default: the engine's default)");
  serve
      ->add_option("--prefix-snapshot-stride", args->prefix_snapshot_stride,
                   "--model: the prefix cache saves a state every this many prompt tokens "
                   "(default: the engine's)")
      ->check(CLI::PositiveNumber);
  serve->add_option("--temperature", args->temperature, "the requests' temperature (default 0: greedy)")
      ->check(CLI::Range(0.0, 2.0));
  serve->add_option("--top-k", args->top_k, "the requests' top_k (default 0: none)")->check(CLI::NonNegativeNumber);
  serve->add_option("--top-p", args->top_p, "the requests' top_p (default 1: none)")->check(CLI::Range(0.0, 1.0));
  serve->add_option("--seed", args->seed, "which paragraphs each request takes (default 1)");
  serve->add_option("--prefill-rate", args->prefill_rate,
                    "the engine's prompt tokens per second (vt bench prefill): with --decode-step-ms, each run "
                    "prints its engine-bound time and efficiency")
      ->check(CLI::NonNegativeNumber);
  serve->add_option("--decode-step-ms", args->decode_step_ms,
                    "the engine's ms per decode step by batch (vt bench decode), e.g. 1:8.5,16:11.1,64:20.1");
  serve->add_flag("--json", args->json, "print one JSON object");
  serve->callback([args] { serve_bench::run_bench_serve(*args); });
}

}  // namespace vt::apps
