// `vt bench serve`'s parts: its options, the streaming OpenAI client (serve_bench_client.cpp), one
// request's measurements, the report (serve_bench_report.cpp: outcomes, percentiles, goodput, the
// rate sweep, the server's gauges after the load) and the multiturn workload
// (serve_bench_multiturn.cpp).
#pragma once

#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vt::apps::serve_bench {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct ServeBenchArgs {
  std::string url, model, api_key, served_model_name, concurrency = "1,16,64",
                                                      workloads = "chat,edit,agent";
  std::string corpus;  // text files, comma-separated (default: the repository's docs)
  // Per run (agent, multiturn: sessions); 0: 2 x concurrency, at least 8 (multiturn: one session
  // per client).
  int64_t requests = 0;
  double duration = 0;         // seconds per run; > 0 replaces --requests
  double request_rate = 0;     // requests per second (Poisson arrivals); 0: back to back
  // Requests the client hangs up on after 1-8 content chunks, chosen from the seed.
  double cancel_fraction = 0;
  // A rate sweep: a list of request rates ("0.5,1,2"), or "ladder" (from --request-rate, default
  // 1, doubling, at most sweep_steps rates); it stops after the first rate whose TPOT p99 exceeds
  // tpot_p99_ms. Goodput counts the requests whose own TPOT is within tpot_p99_ms and TTFT within
  // ttft_ms (0: any).
  std::string sweep;
  int64_t sweep_steps = 8;
  double tpot_p99_ms = 0, ttft_ms = 0;
  // After the load the server's running and waiting requests and KV blocks must be back to 0
  // within this many seconds, else the command fails.
  double settle_timeout = 10;
  int64_t chat_tokens = 64, edit_tokens = 256, edit_paragraphs = 4, agent_turns = 4,
          agent_tokens = 48;
  // multiturn: sessions of `turns` requests sharing a system prompt of about `system_tokens`,
  // each turn adding about `user_tokens` of new text and asking for `multiturn_tokens`; a client
  // waits about `think_time` seconds between its turns.
  int64_t turns = 4, system_tokens = 3000, user_tokens = 256, multiturn_tokens = 128;
  double think_time = 1;
  int64_t cache_tokens = 65536, max_running = 64;  // the in-process server (--model)
  std::string speculative;                         // --model: "" or "ngram"
  int64_t num_draft = 4;
  // --model: "on", "off" or a list ("on,off"): one fresh server per setting; "": the engine's
  // default.
  std::string prefix_cache;
  int64_t prefix_snapshot_stride = 0;  // --model: 0 keeps the engine's default
  double temperature = 0, top_p = 1;   // the requests' sampling (default greedy)
  int64_t top_k = 0;
  uint64_t seed = 1;
  bool json = false;
  // The engine's own rates, for the engine-bound time of each run: prompt tokens per second
  // (`vt bench prefill`) and ms per decode step by batch (`vt bench decode`), "1:8.5,16:11.1".
  double prefill_rate = 0;
  std::string decode_step_ms;
};

struct Sample {
  int status = 0;  // HTTP status; 0: no response, or a stream cut off before [DONE]
  bool cancelled = false;  // the client hung up on purpose (--cancel-fraction)
  std::string error;       // the message of an error event inside a 200 stream
  double ttft = 0, latency = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens; 0 when not reported
  // multiturn: the request's turn in its session (from 1; 0: not a multiturn request), and the
  // prompt tokens it shares with the previous turn's prompt and completion.
  int64_t turn = 0, reusable_tokens = 0;
  std::vector<double> gaps;        // between output chunks
  std::string content, reasoning;  // the reply's delta.content and delta.reasoning_content
};

// A blocking HTTP/1.1 client on Boost.Beast: one new connection per exchange, 10 s to connect and
// 600 s for each read or write.
class ApiClient {
 public:
  // `url`: http://HOST:PORT. `sampling`: the requests' temperature / top_k / top_p fields.
  ApiClient(const std::string& url, std::string api_key, Json sampling = Json::object());

  // Sends one request; the body comes to `receive` in pieces as it arrives (false: hang up). The
  // status (0: none came) and whether the whole body came.
  std::pair<int, bool> exchange(boost::beast::http::verb method, const std::string& path,
                                const std::string& body,
                                const std::function<bool(std::string_view)>& receive) const;
  // Streams one chat completion; hangs up after `cancel_after` content chunks when > 0.
  Sample chat(const std::string& model, const Json& messages, int64_t max_tokens,
              int64_t cancel_after) const;
  // A GET's body, or nothing unless the status is 200.
  std::optional<std::string> get(const std::string& path) const;
  Json get_json(const std::string& path) const;
  // /metrics as "name{labels}" -> value; empty when the server has none.
  std::map<std::string, double> metrics() const;

 private:
  std::string url_, api_key_, host_, port_;
  Json sampling_;
};

// One run: a workload at a concurrency (and a request rate in a sweep) and what its requests got.
struct RunResult {
  std::string workload;
  int64_t concurrency = 0;
  double request_rate = 0;  // 0: back to back
  double seconds = 0;
  std::vector<Sample> samples;
};

// How a request ended. A 200 stream with an error event counts as a 5xx: the server failed it.
enum class Outcome { kOk, kCancelled, kHttp4xx, kHttp5xx, kNoStatus, kOther };
Outcome outcome_of(const Sample& sample);
const char* outcome_name(Outcome outcome);  // "ok", "cancelled", "http_4xx", ...

// Rank-based percentile (the smallest value with at least `fraction` of them at or below it).
double percentile(std::vector<double> values, double fraction);
// mean, p50, p90, p95, p99, p99.9 and max of `seconds`, in ms.
Json percentiles_ms(const std::vector<double>& seconds);
// A request's time per output token after the first (0 with one token).
double time_per_output_token(const Sample& sample);

// The run's requests by outcome and by status, tokens, throughput, TTFT/TPOT/ITL/latency
// percentiles, and its goodput: requests per second that ended ok with TTFT <= ttft_ms (0: any)
// and TPOT <= tpot_ms (0: any).
Json summarize(const RunResult& run, double ttft_ms, double tpot_ms);
void print_header(bool sweep);
void print_run(const Json& summary);

// The request rates of a sweep: a comma-separated list, or "ladder": `start` doubled, `steps`
// rates in all.
std::vector<double> sweep_rates(const std::string& spec, double start, int64_t steps);
// Whether a sweep goes on past this run: its TPOT p99 is within the bound.
bool within_tpot_bound(const Json& summary, double tpot_p99_ms);
// One sweep's report from its rates (each {request_rate, within_bound, goodput_rps, ...}): the
// bounds, the rates, and the highest rate within the bound with its goodput (null: none).
Json sweep_result(const std::string& workload, int64_t concurrency, const Json& rates,
                  const ServeBenchArgs& args);
void print_sweep(const Json& sweep);

// The sum of a /metrics family over its labels; 0 when the server does not report it.
double metric_sum(const std::map<std::string, double>& values, const std::string& name);
// What must be back to 0 once the load is gone, from one /metrics reading: requests running and
// waiting, KV blocks in use (vt's gauges, else vLLM's: kv_cache_usage_perc), and vt's state slots
// and completions in flight. Null where the server reports none of a kind.
Json idle_gauges(const std::map<std::string, double>& metrics);
bool gauges_at_zero(const Json& gauges);  // every gauge reported is 0

// The multiturn workload (serve_bench_multiturn.cpp).
std::string multiturn_system_prompt(const std::vector<std::string>& corpus, int64_t tokens);
// One session: `args.turns` requests, each the whole history plus a new user message; stops early
// at a failed or hung-up turn. `cancel_after` > 0 hangs up the last turn after that many chunks.
std::vector<Sample> run_multiturn_session(const ApiClient& client, const std::string& model,
                                          const std::vector<std::string>& corpus,
                                          const std::string& system_prompt, uint64_t session,
                                          int64_t cancel_after, const ServeBenchArgs& args);
// Tokens and hit rates over the run and per turn, with each turn's TTFT (JSON "multiturn").
Json summarize_multiturn(const std::vector<Sample>& samples, const ServeBenchArgs& args);
void print_multiturn(const Json& summary);
// Multiturn runs with the prefix cache on and off at the same concurrency, side by side, and the
// ratio of their TTFT from turn 3 on (off / on); printed unless `json`. Empty without such pairs.
Json compare_prefix_cache(const Json& runs, bool json);

}  // namespace vt::apps::serve_bench
