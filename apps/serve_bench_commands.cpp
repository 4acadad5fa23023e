// `vt bench serve`: an OpenAI-API load generator for `vt serve` (or any compatible server):
// streaming requests from a fixed number of concurrent clients (optionally paced to a Poisson
// request rate), from workloads made of real text in the repository; reports TTFT, TPOT, ITL and
// throughput per concurrency and workload, plus the server's /metrics afterwards; speculative
// decoding's accepted drafts per step (mean, histogram) and acceptance by draft position per run
// when the server reports them.
//   vt bench serve (--url http://HOST:PORT | --model FILE.gguf|DIR) [--concurrency 1,16,64]
//                  [--workload chat,edit,agent] [--requests N | --duration S] [--request-rate R]
//                  [--cancel-fraction F] [--speculative ngram [--num-draft K]]
//                  [--temperature T] [--top-k K] [--top-p P] [--json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "apps/commands.h"
#include "apps/model_text.h"
#include "core/error.h"
#include "engine/engine.h"
#include "server/server.h"

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

struct ServeBenchArgs {
  std::string url, model, api_key, served_model_name, concurrency = "1,16,64",
                                                      workloads = "chat,edit,agent";
  std::string corpus;          // text files, comma-separated (default: the repository's docs)
  int64_t requests = 0;        // per run; 0: 2 x concurrency (at least 8)
  double duration = 0;         // seconds per run; > 0 replaces --requests
  double request_rate = 0;     // requests per second (Poisson arrivals); 0: back to back
  double cancel_fraction = 0;  // requests the client hangs up on after a few tokens
  int64_t chat_tokens = 64, edit_tokens = 256, edit_paragraphs = 4, agent_turns = 4,
          agent_tokens = 48;
  int64_t cache_tokens = 65536, max_running = 64;  // the in-process server (--model)
  std::string speculative;                         // --model: "" or "ngram"
  int64_t num_draft = 4;
  double temperature = 0, top_p = 1;  // the requests' sampling (default greedy)
  int64_t top_k = 0;
  uint64_t seed = 1;
  bool json = false;
  // The engine's own rates, for the engine-bound time of each run: prompt tokens per second
  // (`vt bench prefill`) and ms per decode step by batch (`vt bench decode`), "1:8.5,16:11.1".
  double prefill_rate = 0;
  std::string decode_step_ms;
};

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
// so the output repeats much of the prompt. agent: a session of turns whose context grows with
// each answer (built as it runs, see run_session).
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

struct Sample {
  int status = 0;  // HTTP status; 0: no response
  bool cancelled = false;
  double ttft = 0, latency = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::vector<double> gaps;  // between output chunks
  std::string text;
};

// A blocking HTTP/1.1 client on Boost.Beast: one new connection per exchange, 10 s to connect and
// 600 s for each read or write.
class ApiClient {
 public:
  // `url`: http://HOST:PORT. `sampling`: the requests' temperature / top_k / top_p fields.
  ApiClient(const std::string& url, std::string api_key, Json sampling = Json::object())
      : url_(url), api_key_(std::move(api_key)), sampling_(std::move(sampling)) {
    std::string rest = url;
    if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
    rest = rest.substr(0, rest.find('/'));
    const size_t colon = rest.rfind(':');
    host_ = colon == std::string::npos ? rest : rest.substr(0, colon);
    port_ = colon == std::string::npos ? "80" : rest.substr(colon + 1);
    VT_CHECK(!host_.empty(), "bench serve: --url '", url, "' is not http://HOST:PORT");
  }

  // Sends one request; the body comes to `receive` in pieces as it arrives (false: hang up). The
  // status (0: none came) and whether the whole body came.
  std::pair<int, bool> exchange(http::verb method, const std::string& path, const std::string& body,
                                const std::function<bool(std::string_view)>& receive) const {
    net::io_context io;
    beast::tcp_stream stream(io);
    beast::error_code error;
    auto wait = [&] {  // runs the pending operation to its end
      io.restart();
      io.run();
      return !error;
    };
    net::ip::tcp::resolver resolver(io);
    const auto endpoints = resolver.resolve(host_, port_, error);
    if (error) return {0, false};
    stream.expires_after(std::chrono::seconds(10));
    stream.async_connect(endpoints, [&](beast::error_code result, const auto&) { error = result; });
    if (!wait()) return {0, false};
    stream.socket().set_option(net::ip::tcp::no_delay(true), error);
    http::request<http::string_body> request(method, path, 11);
    request.set(http::field::host, host_);
    if (!api_key_.empty()) request.set(http::field::authorization, "Bearer " + api_key_);
    if (method == http::verb::post) request.set(http::field::content_type, "application/json");
    request.body() = body;
    request.prepare_payload();
    stream.expires_after(std::chrono::seconds(600));
    http::async_write(stream, request, [&](beast::error_code result, size_t) { error = result; });
    if (!wait()) return {0, false};
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(std::numeric_limits<uint64_t>::max());
    stream.expires_after(std::chrono::seconds(600));
    http::async_read_header(stream, buffer, parser, [&](beast::error_code result, size_t) { error = result; });
    if (!wait()) return {0, false};
    const int status = int(parser.get().result_int());
    char piece[16384];
    while (!parser.is_done()) {
      parser.get().body().data = piece;
      parser.get().body().size = sizeof(piece);
      stream.expires_after(std::chrono::seconds(600));
      http::async_read_some(stream, buffer, parser, [&](beast::error_code result, size_t) {
        error = result == http::error::need_buffer ? beast::error_code() : result;
      });
      if (!wait()) return {status, false};  // cut off
      const size_t size = sizeof(piece) - parser.get().body().size;
      if (size > 0 && !receive(std::string_view(piece, size))) return {status, false};  // hang up
    }
    return {status, true};
  }

  // Streams one chat completion; hangs up after `cancel_after` content chunks when > 0.
  Sample chat(const std::string& model, const Json& messages, int64_t max_tokens,
              int64_t cancel_after) const {
    Json body = {{"model", model},           {"messages", messages},
                 {"max_tokens", max_tokens}, {"temperature", 0},
                 {"stream", true},           {"stream_options", {{"include_usage", true}}}};
    body.update(sampling_);
    Sample sample;
    std::string buffer;
    const auto start = Clock::now();
    auto last = start;
    int64_t chunks = 0;
    auto receive = [&](std::string_view data) {
      buffer.append(data);
      for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
        const std::string event = buffer.substr(0, end);
        buffer.erase(0, end + 2);
        if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
        const Json chunk = Json::parse(event.substr(6), nullptr, false);
        if (chunk.is_discarded()) continue;
        if (chunk.contains("usage") && chunk["usage"].is_object()) {
          sample.prompt_tokens = chunk["usage"].value("prompt_tokens", int64_t(0));
          sample.completion_tokens = chunk["usage"].value("completion_tokens", int64_t(0));
        }
        if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
        // A token's text arrives as content, or as reasoning_content while the model thinks (the
        // family's templates open <think> in the prompt): either is the next chunk of output.
        const Json& delta = chunk["choices"][0]["delta"];
        const auto text_of = [&](const char* field) {
          return delta.contains(field) && delta[field].is_string() ? delta[field].get<std::string>() : std::string();
        };
        const std::string text = text_of("content") + text_of("reasoning_content");
        if (text.empty()) continue;
        const auto now = Clock::now();
        if (chunks == 0)
          sample.ttft = std::chrono::duration<double>(now - start).count();
        else
          sample.gaps.push_back(std::chrono::duration<double>(now - last).count());
        last = now;
        sample.text += text;
        if (++chunks == cancel_after) {
          sample.cancelled = true;
          return false;  // hang up
        }
      }
      return true;
    };
    const auto [status, complete] = exchange(http::verb::post, "/v1/chat/completions", body.dump(), receive);
    sample.status = status;
    sample.latency = std::chrono::duration<double>(Clock::now() - start).count();
    if (sample.cancelled) return sample;
    if (!complete && sample.status == 200) sample.status = 0;  // cut off
    if (sample.completion_tokens == 0) sample.completion_tokens = chunks;
    return sample;
  }

  // A GET's body, or nothing unless the status is 200.
  std::optional<std::string> get(const std::string& path) const {
    std::string body;
    const auto [status, complete] = exchange(http::verb::get, path, "", [&](std::string_view data) {
      body.append(data);
      return true;
    });
    if (status != 200 || !complete) return std::nullopt;
    return body;
  }

  Json get_json(const std::string& path) const {
    const auto body = get(path);
    VT_CHECK(body, "bench serve: GET ", url_, path, " failed");
    return Json::parse(*body);
  }

  std::map<std::string, double> metrics() const {
    std::map<std::string, double> values;
    const auto body = get("/metrics");
    if (!body) return values;
    std::stringstream lines(*body);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] == '#') continue;
      const size_t space = line.rfind(' ');
      if (space == std::string::npos) continue;
      try {
        values[line.substr(0, space)] = std::stod(line.substr(space + 1));
      } catch (const std::exception&) {
      }
    }
    return values;
  }

 private:
  std::string url_, api_key_, host_, port_;
  Json sampling_;
};

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

double percentile(std::vector<double> values, double fraction) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = size_t(std::ceil(fraction * double(values.size())));
  return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
}

struct RunResult {
  std::string workload;
  int64_t concurrency = 0;
  double seconds = 0;
  std::vector<Sample> samples;
};

Json summarize(const RunResult& run) {
  std::vector<double> ttft, tpot, itl, latency;
  int64_t ok = 0, cancelled = 0, output_tokens = 0, prompt_tokens = 0;
  std::map<std::string, int64_t> statuses;
  for (const Sample& sample : run.samples) {
    ++statuses[std::to_string(sample.status)];
    output_tokens += sample.completion_tokens;
    prompt_tokens += sample.prompt_tokens;
    if (sample.cancelled) {
      ++cancelled;
      continue;
    }
    if (sample.status != 200) continue;
    ++ok;
    ttft.push_back(sample.ttft);
    latency.push_back(sample.latency);
    if (sample.completion_tokens > 1)
      tpot.push_back((sample.latency - sample.ttft) / double(sample.completion_tokens - 1));
    itl.insert(itl.end(), sample.gaps.begin(), sample.gaps.end());
  }
  auto ms = [](double seconds) { return std::round(seconds * 1e5) / 100; };
  return {{"workload", run.workload},
          {"concurrency", run.concurrency},
          {"requests", run.samples.size()},
          {"ok", ok},
          {"cancelled", cancelled},
          {"status_counts", statuses},
          {"seconds", std::round(run.seconds * 100) / 100},
          {"prompt_tokens", prompt_tokens},
          {"output_tokens", output_tokens},
          {"output_tokens_per_second", std::round(double(output_tokens) / run.seconds * 100) / 100},
          {"requests_per_second", std::round(double(ok) / run.seconds * 1000) / 1000},
          {"ttft_ms", {{"p50", ms(percentile(ttft, 0.5))}, {"p99", ms(percentile(ttft, 0.99))}}},
          {"tpot_ms", {{"p50", ms(percentile(tpot, 0.5))}, {"p99", ms(percentile(tpot, 0.99))}}},
          {"itl_ms", {{"p50", ms(percentile(itl, 0.5))}, {"p99", ms(percentile(itl, 0.99))}}},
          {"latency_ms",
           {{"p50", ms(percentile(latency, 0.5))}, {"p99", ms(percentile(latency, 0.99))}}}};
}

// `concurrency` clients issue requests until the count or the duration is reached; with a rate,
// each request also waits for its Poisson arrival time.
RunResult run_point(const ApiClient& client, const std::string& model, const std::string& workload,
                    int64_t concurrency, const std::vector<std::string>& corpus,
                    const ServeBenchArgs& args) {
  const int64_t total =
      args.duration > 0
          ? INT64_MAX
          : (args.requests > 0 ? args.requests : std::max<int64_t>(8, 2 * concurrency));
  std::vector<double> arrivals;  // seconds from the start, for --request-rate
  std::mt19937_64 rng(args.seed);
  std::atomic<int64_t> next{0};
  std::mutex mutex;
  RunResult run;
  run.workload = workload;
  run.concurrency = concurrency;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(args.duration));
  auto arrival_of = [&](int64_t index) {  // lazily extended, under mutex
    std::exponential_distribution<double> gap(args.request_rate);
    while (int64_t(arrivals.size()) <= index)
      arrivals.push_back((arrivals.empty() ? 0 : arrivals.back()) + gap(rng));
    return arrivals[size_t(index)];
  };
  auto cancels = [&](int64_t index) {  // a fixed, spread-out subset of the requests
    return args.cancel_fraction > 0 &&
           std::fmod(double(index) * 0.6180339887498949, 1.0) < args.cancel_fraction;
  };
  auto worker = [&] {
    while (true) {
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
      }
      const int64_t cancel_after = cancels(index) ? 1 + index % 8 : 0;
      std::vector<Sample> samples;
      Turn turn = make_turn(workload, corpus, args.seed * 7919 + uint64_t(index), args);
      if (workload != "agent") {
        samples.push_back(client.chat(model, turn.messages, turn.max_tokens, cancel_after));
      } else {
        // One session: each answer joins the context of the next turn.
        for (int64_t step = 0; step < args.agent_turns; ++step) {
          samples.push_back(client.chat(model, turn.messages, turn.max_tokens,
                                        step + 1 == args.agent_turns ? cancel_after : 0));
          const Sample& answer = samples.back();
          if (answer.status != 200 || answer.cancelled) break;
          turn.messages.push_back({{"role", "assistant"}, {"content", answer.text}});
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
  for (int64_t i = 0; i < concurrency; ++i) threads.emplace_back(worker);
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

void run_bench_serve(const ServeBenchArgs& args) {
  VT_CHECK(args.url.empty() != args.model.empty(),
           "bench serve: give --url (a running server) or --model (start one here)");
  VT_CHECK(args.speculative.empty() || !args.model.empty(),
           "bench serve: --speculative configures the in-process server (--model); a server at --url speculates "
           "as it was started (vt serve --speculative ngram)");
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
    VT_CHECK(workload == "chat" || workload == "edit" || workload == "agent", "--workload: '",
             workload, "' is not chat, edit or agent");
  const auto corpus = load_corpus(args);

  // --model: the server runs in this process on a free port of the loopback.
  std::unique_ptr<vt::apps::ModelText> text;
  std::unique_ptr<vt::Model> model;
  std::unique_ptr<vt::Engine> engine;
  std::unique_ptr<vt::server::Server> server;
  std::thread server_thread;
  std::string url = args.url;
  if (!args.model.empty()) {
    text = std::make_unique<vt::apps::ModelText>(vt::apps::load_model_text(args.model));
    model = vt::apps::load_model_with_progress(args.model);
    vt::EngineOptions options;
    options.max_running = args.max_running;
    options.cache_blocks = args.cache_tokens / options.block_size;
    options.admission_watermark_blocks = -1;
    VT_CHECK(args.speculative.empty() || args.speculative == "ngram", "bench serve: --speculative '", args.speculative,
             "': the server drafts with ngram only");
    if (!args.speculative.empty()) {
      options.max_num_draft = args.num_draft;
      options.step_token_budget = std::max(options.step_token_budget, options.max_running * (1 + args.num_draft));
    }
    engine = std::make_unique<vt::Engine>(*model, text->tokenizer.get(), options);
    vt::server::ServerOptions server_options;
    server_options.num_draft = options.max_num_draft;
    server_options.port = 0;
    server_options.model_name = "bench";
    server_options.api_key = args.api_key;
    vt::server::ModelTextView view{text->tokenizer.get(), &text->chat_templates, text->stop_ids};
    server = std::make_unique<vt::server::Server>(*engine, view, server_options);
    url = "http://127.0.0.1:" + std::to_string(server->bind());
    server_thread = std::thread([&] { server->run(); });
  }
  struct StopServer {  // also on errors
    std::unique_ptr<vt::server::Server>& server;
    std::thread& thread;
    ~StopServer() {
      if (!server) return;
      server->stop();
      thread.join();
    }
  } stop_server{server, server_thread};

  Json sampling = {{"temperature", args.temperature}, {"top_p", args.top_p}};
  if (args.top_k > 0) sampling["top_k"] = args.top_k;
  ApiClient client(url, args.api_key, sampling);
  std::string model_name = args.served_model_name;
  if (model_name.empty())
    model_name = client.get_json("/v1/models")["data"][0]["id"].get<std::string>();
  Json runs = Json::array();
  const std::map<int64_t, double> decode_steps = parse_decode_steps(args.decode_step_ms);
  if (!args.json)
    std::printf("%-6s %5s %6s %5s %6s %9s %9s %9s %9s %9s %9s %10s\n", "load", "conc", "reqs", "ok",
                "cancel", "ttft_p50", "ttft_p99", "tpot_p50", "itl_p50", "itl_p99", "tok/s", "5xx");
  for (const std::string& workload : workloads) {
    for (int64_t clients : concurrency) {
      const auto metrics_before = client.metrics();
      Json summary = summarize(run_point(client, model_name, workload, clients, corpus, args));
      const auto metrics_after = client.metrics();
      const Json speculative = speculative_delta(metrics_before, metrics_after);
      add_engine_bound(summary, args, decode_steps, metrics_before, metrics_after);
      if (!speculative.is_null()) summary["speculative"] = speculative;
      int64_t server_errors = 0;
      for (const auto& [status, count] : summary["status_counts"].items())
        if (status[0] == '5' || status == "0") server_errors += count.get<int64_t>();
      if (!args.json)
        std::printf("%-6s %5lld %6lld %5lld %6lld %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %10lld\n",
                    workload.c_str(), static_cast<long long>(clients),
                    static_cast<long long>(summary["requests"].get<int64_t>()),
                    static_cast<long long>(summary["ok"].get<int64_t>()),
                    static_cast<long long>(summary["cancelled"].get<int64_t>()),
                    summary["ttft_ms"]["p50"].get<double>(),
                    summary["ttft_ms"]["p99"].get<double>(),
                    summary["tpot_ms"]["p50"].get<double>(), summary["itl_ms"]["p50"].get<double>(),
                    summary["itl_ms"]["p99"].get<double>(),
                    summary["output_tokens_per_second"].get<double>(),
                    static_cast<long long>(server_errors));
      if (!args.json && summary.contains("engine_bound_s"))
        std::printf("       engine-bound %.2f s of %.2f s measured: efficiency %.0f%%\n",
                    summary["engine_bound_s"].get<double>(), summary["seconds"].get<double>(),
                    100 * summary["efficiency"].get<double>());
      if (!args.json && summary["engine_steps"]["count"].get<double>() > 0)
        std::printf("       server steps: %.0f, %.2f s (forwards %.2f s, host %.2f s)\n",
                    summary["engine_steps"]["count"].get<double>(), summary["engine_steps"]["wall_s"].get<double>(),
                    summary["engine_steps"]["forward_s"].get<double>(), summary["engine_steps"]["host_s"].get<double>());
      if (!args.json && !speculative.is_null())
        std::printf("       speculative: %.2f drafts accepted/step (%.2f tokens/step over %lld steps), acceptance %.1f%%, "
                    "accepted per step %s, acceptance by position %s\n",
                    speculative["accepted_per_step"].get<double>(), speculative["tokens_per_step"].get<double>(),
                    static_cast<long long>(speculative["steps"].get<int64_t>()),
                    100 * speculative["acceptance_rate"].get<double>(),
                    speculative["accepted_histogram"].dump().c_str(),
                    speculative["acceptance_by_position"].dump().c_str());
      std::fflush(stdout);
      runs.push_back(summary);
    }
  }
  // What the server holds once the load is gone: everything should be back.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto values = client.metrics();
  Json after = Json::object();
  for (const char* name :
       {"vt_requests_running", "vt_requests_waiting", "vt_kv_blocks_used", "vt_state_slots_used",
        "vt_preemptions_total", "vt_requests_cancelled_total", "vt_http_requests_in_flight"})
    if (values.count(name)) after[name] = values.at(name);
  Json responses = Json::object();
  for (const auto& [name, value] : values)
    if (name.rfind("vt_http_responses_total{code=\"", 0) == 0)
      responses[name.substr(30, 3)] = value;
  after["http_responses"] = responses;
  if (args.json) {
    std::printf("%s\n",
                Json{{"url", url}, {"model", model_name}, {"sampling", sampling}, {"runs", runs},
                     {"server_after", after}}
                    .dump(2)
                    .c_str());
  } else {
    std::printf("server after the load: %s\n", after.dump().c_str());
  }
}

}  // namespace

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
  auto args = std::make_shared<ServeBenchArgs>();
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
                    "chat, edit, agent, comma-separated (default all three)");
  serve->add_option("--corpus", args->corpus,
                    "text files for the prompts, comma-separated (default README.md, docs/*.md)");
  serve
      ->add_option("--requests", args->requests,
                   "requests (agent: sessions) per run (default 2 x concurrency, >= 8)")
      ->check(CLI::PositiveNumber);
  serve->add_option("--duration", args->duration, "seconds per run instead of a request count")
      ->check(CLI::PositiveNumber);
  serve
      ->add_option("--request-rate", args->request_rate,
                   "Poisson arrivals per second (default: back to back)")
      ->check(CLI::NonNegativeNumber);
  serve
      ->add_option("--cancel-fraction", args->cancel_fraction,
                   "fraction of requests hung up after 1-8 tokens")
      ->check(CLI::Range(0.0, 1.0));
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
  serve->callback([args] { run_bench_serve(*args); });
}

}  // namespace vt::apps
