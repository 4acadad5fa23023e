// `vt bench serve`'s report: each request's outcome, a run's percentiles, throughput and goodput,
// the rates of a sweep, and the gauges that must be back to 0 once the load is gone.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "apps/serve_bench.h"
#include "core/error.h"

namespace vt::apps::serve_bench {

Outcome outcome_of(const Sample& sample) {
  if (sample.cancelled) return Outcome::kCancelled;
  if (sample.status == 0) return Outcome::kNoStatus;
  if (sample.status == 200) return sample.error.empty() ? Outcome::kOk : Outcome::kHttp5xx;
  if (sample.status >= 400 && sample.status < 500) return Outcome::kHttp4xx;
  if (sample.status >= 500) return Outcome::kHttp5xx;
  return Outcome::kOther;
}

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk: return "ok";
    case Outcome::kCancelled: return "cancelled";
    case Outcome::kHttp4xx: return "http_4xx";
    case Outcome::kHttp5xx: return "http_5xx";
    case Outcome::kNoStatus: return "no_status";
    case Outcome::kOther: break;
  }
  return "other";
}

double percentile(std::vector<double> values, double fraction) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = size_t(std::ceil(fraction * double(values.size())));
  return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
}

Json percentiles_ms(const std::vector<double>& seconds) {
  const auto ms = [](double value) { return std::round(value * 1e5) / 100; };
  const double mean =
      seconds.empty() ? 0 : std::accumulate(seconds.begin(), seconds.end(), 0.0) / double(seconds.size());
  return {{"mean", ms(mean)},
          {"p50", ms(percentile(seconds, 0.5))},
          {"p90", ms(percentile(seconds, 0.9))},
          {"p95", ms(percentile(seconds, 0.95))},
          {"p99", ms(percentile(seconds, 0.99))},
          {"p99.9", ms(percentile(seconds, 0.999))},
          {"max", ms(percentile(seconds, 1.0))}};
}

double time_per_output_token(const Sample& sample) {
  if (sample.completion_tokens <= 1) return 0;
  return (sample.latency - sample.ttft) / double(sample.completion_tokens - 1);
}

Json summarize(const RunResult& run, double ttft_ms, double tpot_ms) {
  std::vector<double> ttft, tpot, itl, latency;
  int64_t output_tokens = 0, prompt_tokens = 0, cached_tokens = 0, good = 0;
  std::map<std::string, int64_t> statuses;
  Json outcomes = Json::object();
  for (Outcome outcome : {Outcome::kOk, Outcome::kCancelled, Outcome::kHttp4xx, Outcome::kHttp5xx,
                          Outcome::kNoStatus, Outcome::kOther})
    outcomes[outcome_name(outcome)] = 0;
  for (const Sample& sample : run.samples) {
    const Outcome outcome = outcome_of(sample);
    outcomes[outcome_name(outcome)] = outcomes[outcome_name(outcome)].get<int64_t>() + 1;
    ++statuses[std::to_string(sample.status)];
    output_tokens += sample.completion_tokens;
    prompt_tokens += sample.prompt_tokens;
    cached_tokens += sample.cached_tokens;
    if (outcome != Outcome::kOk) continue;
    ttft.push_back(sample.ttft);
    latency.push_back(sample.latency);
    const double per_token = time_per_output_token(sample);
    if (sample.completion_tokens > 1) tpot.push_back(per_token);
    itl.insert(itl.end(), sample.gaps.begin(), sample.gaps.end());
    good += (ttft_ms <= 0 || sample.ttft * 1e3 <= ttft_ms) && (tpot_ms <= 0 || per_token * 1e3 <= tpot_ms);
  }
  const double seconds = std::max(run.seconds, 1e-9);
  const int64_t ok = outcomes["ok"].get<int64_t>();
  Json summary = {{"workload", run.workload},
                  {"concurrency", run.concurrency},
                  {"requests", run.samples.size()},
                  {"ok", ok},
                  {"cancelled", outcomes["cancelled"]},
                  {"outcomes", outcomes},
                  {"status_counts", statuses},
                  {"seconds", std::round(run.seconds * 100) / 100},
                  {"prompt_tokens", prompt_tokens},
                  {"cached_tokens", cached_tokens},
                  {"output_tokens", output_tokens},
                  {"output_tokens_per_second", std::round(double(output_tokens) / seconds * 100) / 100},
                  {"requests_per_second", std::round(double(ok) / seconds * 1000) / 1000},
                  {"goodput", {{"requests", good},
                               {"requests_per_second", std::round(double(good) / seconds * 1000) / 1000},
                               {"ttft_ms", ttft_ms},
                               {"tpot_ms", tpot_ms}}},
                  {"ttft_ms", percentiles_ms(ttft)},
                  {"tpot_ms", percentiles_ms(tpot)},
                  {"itl_ms", percentiles_ms(itl)},
                  {"latency_ms", percentiles_ms(latency)}};
  if (run.request_rate > 0) summary["request_rate"] = run.request_rate;
  return summary;
}

void print_header(bool sweep) {
  std::printf("%-9s %5s %7s %6s %5s %6s %5s %5s %6s %9s %9s %9s %9s %9s %9s %9s\n", "load", "conc",
              sweep ? "rate" : "", "reqs", "ok", "cancel", "4xx", "5xx", "nostat", "ttft_p50", "ttft_p99",
              "tpot_p50", "tpot_p99", "itl_p99", "tok/s", "goodput");
}

void print_run(const Json& summary) {
  const Json& outcomes = summary["outcomes"];
  const auto count = [](const Json& value) { return static_cast<long long>(value.get<int64_t>()); };
  char rate[32] = "";
  if (summary.contains("request_rate"))
    std::snprintf(rate, sizeof(rate), "%.3g", summary["request_rate"].get<double>());
  std::printf("%-9s %5lld %7s %6lld %5lld %6lld %5lld %5lld %6lld %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.3f\n",
              summary["workload"].get<std::string>().c_str(), count(summary["concurrency"]), rate,
              count(summary["requests"]), count(outcomes["ok"]), count(outcomes["cancelled"]),
              count(outcomes["http_4xx"]), count(outcomes["http_5xx"]), count(outcomes["no_status"]),
              summary["ttft_ms"]["p50"].get<double>(), summary["ttft_ms"]["p99"].get<double>(),
              summary["tpot_ms"]["p50"].get<double>(), summary["tpot_ms"]["p99"].get<double>(),
              summary["itl_ms"]["p99"].get<double>(), summary["output_tokens_per_second"].get<double>(),
              summary["goodput"]["requests_per_second"].get<double>());
  if (summary.contains("engine_bound_s"))
    std::printf("       engine-bound %.2f s of %.2f s measured: efficiency %.0f%%\n",
                summary["engine_bound_s"].get<double>(), summary["seconds"].get<double>(),
                100 * summary["efficiency"].get<double>());
  if (summary.contains("engine_steps") && summary["engine_steps"]["count"].get<double>() > 0)
    std::printf("       server steps: %.0f, %.2f s (forwards %.2f s, host %.2f s)\n",
                summary["engine_steps"]["count"].get<double>(),
                summary["engine_steps"]["wall_s"].get<double>(),
                summary["engine_steps"]["forward_s"].get<double>(),
                summary["engine_steps"]["host_s"].get<double>());
  if (summary.contains("speculative")) {
    const Json& speculative = summary["speculative"];
    std::printf(
        "       speculative: %.2f drafts accepted/step (%.2f tokens/step over %lld steps), "
        "acceptance %.1f%%, accepted per step %s, acceptance by position %s\n",
        speculative["accepted_per_step"].get<double>(),
        speculative["tokens_per_step"].get<double>(),
        static_cast<long long>(speculative["steps"].get<int64_t>()),
        100 * speculative["acceptance_rate"].get<double>(),
        speculative["accepted_histogram"].dump().c_str(),
        speculative["acceptance_by_position"].dump().c_str());
  }
  if (summary.contains("multiturn")) print_multiturn(summary);
}

std::vector<double> sweep_rates(const std::string& spec, double start, int64_t steps) {
  std::vector<double> rates;
  if (spec == "ladder") {
    VT_CHECK(start > 0 && steps >= 1, "--sweep ladder: needs a starting --request-rate > 0 and --sweep-steps >= 1");
    for (int64_t i = 0; i < steps; ++i) rates.push_back(start * std::pow(2.0, double(i)));
    return rates;
  }
  std::stringstream list(spec);
  for (std::string item; std::getline(list, item, ',');) {
    if (item.empty()) continue;
    double rate = 0;
    try {
      size_t used = 0;
      rate = std::stod(item, &used);
      VT_CHECK(used == item.size(), "");
    } catch (const std::exception&) {
      VT_FAIL("--sweep: '", item, "' is not a request rate (or give --sweep ladder)");
    }
    VT_CHECK(rate > 0 && std::isfinite(rate), "--sweep: rate ", rate, " must be > 0");
    VT_CHECK(rates.empty() || rate > rates.back(), "--sweep: the rates must rise, ", rate, " after ", rates.back());
    rates.push_back(rate);
  }
  VT_CHECK(!rates.empty(), "--sweep: no rates in '", spec, "'");
  return rates;
}

bool within_tpot_bound(const Json& summary, double tpot_p99_ms) {
  return summary["tpot_ms"]["p99"].get<double>() <= tpot_p99_ms;
}

Json sweep_result(const std::string& workload, int64_t concurrency, const Json& rates,
                  const ServeBenchArgs& args) {
  Json best = nullptr;  // the highest rate within the bound, and its goodput
  for (const Json& rate : rates)
    if (rate["within_bound"].get<bool>()) best = rate;
  return {{"workload", workload},
          {"concurrency", concurrency},
          {"tpot_p99_ms_bound", args.tpot_p99_ms},
          {"ttft_ms_bound", args.ttft_ms},
          {"rates", rates},
          {"max_rate_within_bound", best.is_null() ? Json(nullptr) : best["request_rate"]},
          {"goodput_rps_at_max_rate", best.is_null() ? Json(nullptr) : best["goodput_rps"]}};
}

void print_sweep(const Json& sweep) {
  std::printf("\nsweep %s at up to %lld clients, TPOT p99 bound %.1f ms%s:\n",
              sweep["workload"].get<std::string>().c_str(),
              static_cast<long long>(sweep["concurrency"].get<int64_t>()),
              sweep["tpot_p99_ms_bound"].get<double>(),
              sweep["ttft_ms_bound"].get<double>() > 0
                  ? (", TTFT bound " + std::to_string(int64_t(sweep["ttft_ms_bound"].get<double>())) + " ms").c_str()
                  : "");
  std::printf("%9s %9s %9s %9s %9s %9s %7s\n", "rate", "req/s", "goodput", "ttft_p99", "tpot_p50",
              "tpot_p99", "bound");
  for (const Json& rate : sweep["rates"])
    std::printf("%9.3g %9.3f %9.3f %9.1f %9.1f %9.1f %7s\n", rate["request_rate"].get<double>(),
                rate["requests_per_second"].get<double>(), rate["goodput_rps"].get<double>(),
                rate["ttft_ms"]["p99"].get<double>(), rate["tpot_ms"]["p50"].get<double>(),
                rate["tpot_ms"]["p99"].get<double>(), rate["within_bound"].get<bool>() ? "ok" : "over");
  if (sweep["max_rate_within_bound"].is_null())
    std::printf("no rate kept TPOT p99 within the bound\n");
  else
    std::printf("highest rate within the bound: %.3g req/s, goodput %.3f req/s\n",
                sweep["max_rate_within_bound"].get<double>(), sweep["goodput_rps_at_max_rate"].get<double>());
}

double metric_sum(const std::map<std::string, double>& values, const std::string& name) {
  double sum = 0;
  for (auto it = values.lower_bound(name);
       it != values.end() && it->first.compare(0, name.size(), name) == 0; ++it)
    if (it->first.size() == name.size() || it->first[name.size()] == '{') sum += it->second;
  return sum;
}

Json idle_gauges(const std::map<std::string, double>& metrics) {
  const auto has = [&](const std::string& name) {
    const auto it = metrics.lower_bound(name);
    return it != metrics.end() && it->first.compare(0, name.size(), name) == 0 &&
           (it->first.size() == name.size() || it->first[name.size()] == '{');
  };
  // vt's own names first; another OpenAI server may export only vLLM's.
  const auto pick = [&](std::initializer_list<const char*> names) -> Json {
    for (const char* name : names)
      if (has(name)) return metric_sum(metrics, name);
    return nullptr;
  };
  // KV blocks requests hold: those only vt's prefix cache holds are free for the next request.
  Json kv_blocks = pick({"vt_kv_blocks_used", "vllm:kv_cache_usage_perc"});
  if (has("vt_kv_blocks_used") && has("vt_prefix_cache_blocks"))
    kv_blocks = kv_blocks.get<double>() - metric_sum(metrics, "vt_prefix_cache_blocks");
  return {{"running", pick({"vt_requests_running", "vllm:num_requests_running"})},
          {"waiting", pick({"vt_requests_waiting", "vllm:num_requests_waiting"})},
          {"kv_blocks", kv_blocks},
          {"state_slots", pick({"vt_state_slots_used"})},
          {"requests_in_flight", pick({"vt_http_requests_in_flight"})}};
}

bool gauges_at_zero(const Json& gauges) {
  for (const auto& [name, value] : gauges.items())
    if (!value.is_null() && value.get<double>() != 0) return false;
  return true;
}

}  // namespace vt::apps::serve_bench
