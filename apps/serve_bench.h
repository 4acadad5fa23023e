// `vt bench serve`'s parts: its options, the streaming OpenAI client (serve_bench_client.cpp), one
// request's measurements, and the multiturn workload (serve_bench_multiturn.cpp).
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
  double cancel_fraction = 0;  // requests the client hangs up on after a few tokens
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
  int status = 0;  // HTTP status; 0: no response
  bool cancelled = false;
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

double percentile(std::vector<double> values, double fraction);
// p50, p90 and p99 of `seconds`, in ms.
Json percentiles_ms(const std::vector<double>& seconds);

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
