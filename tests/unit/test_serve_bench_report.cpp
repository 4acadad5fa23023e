// `vt bench serve`'s report without a server: outcomes of requests, percentiles, goodput against
// TTFT/TPOT bounds, the sweep's rates and its stop rule, and the gauges that must return to 0.
#include <gtest/gtest.h>

#include "apps/serve_bench.h"
#include "core/error.h"

namespace vt::apps::serve_bench {
namespace {

// A streamed request that got `tokens` tokens, the first after `ttft` s, then one every `tpot` s.
Sample streamed(double ttft, double tpot, int64_t tokens) {
  Sample sample;
  sample.status = 200;
  sample.ttft = ttft;
  sample.completion_tokens = tokens;
  sample.latency = ttft + tpot * double(tokens - 1);
  for (int64_t i = 1; i < tokens; ++i) sample.gaps.push_back(tpot);
  return sample;
}

TEST(ServeBenchReport, Outcomes) {
  Sample ok = streamed(0.1, 0.01, 4), cancelled = ok, bad = ok, overloaded = ok, none = ok, failed = ok;
  cancelled.cancelled = true;
  bad.status = 400;
  overloaded.status = 503;
  none.status = 0;
  failed.error = "generation failed: device error";  // an error event in a 200 stream
  EXPECT_EQ(outcome_of(ok), Outcome::kOk);
  EXPECT_EQ(outcome_of(cancelled), Outcome::kCancelled);
  EXPECT_EQ(outcome_of(bad), Outcome::kHttp4xx);
  EXPECT_EQ(outcome_of(overloaded), Outcome::kHttp5xx);
  EXPECT_EQ(outcome_of(none), Outcome::kNoStatus);
  EXPECT_EQ(outcome_of(failed), Outcome::kHttp5xx);

  RunResult run;
  run.workload = "chat";
  run.concurrency = 4;
  run.seconds = 2;
  run.samples = {ok, ok, cancelled, bad, overloaded, none, failed};
  const Json summary = summarize(run, 0, 0);
  EXPECT_EQ(summary["requests"], 7);
  EXPECT_EQ(summary["ok"], 2);
  EXPECT_EQ(summary["outcomes"]["ok"], 2);
  EXPECT_EQ(summary["outcomes"]["cancelled"], 1);
  EXPECT_EQ(summary["outcomes"]["http_4xx"], 1);
  EXPECT_EQ(summary["outcomes"]["http_5xx"], 2);
  EXPECT_EQ(summary["outcomes"]["no_status"], 1);
  EXPECT_EQ(summary["outcomes"]["other"], 0);
  EXPECT_EQ(summary["status_counts"]["200"], 4);
  EXPECT_DOUBLE_EQ(summary["requests_per_second"].get<double>(), 1.0);
  EXPECT_FALSE(summary.contains("request_rate"));  // back to back
}

TEST(ServeBenchReport, Percentiles) {
  std::vector<double> values;
  for (int i = 1; i <= 1000; ++i) values.push_back(i / 1000.0);  // 1 ms .. 1000 ms
  EXPECT_DOUBLE_EQ(percentile(values, 0.5), 0.5);
  EXPECT_DOUBLE_EQ(percentile(values, 0.99), 0.99);
  EXPECT_DOUBLE_EQ(percentile(values, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(percentile({}, 0.5), 0.0);
  EXPECT_DOUBLE_EQ(percentile({7}, 0.99), 7.0);
  const Json ms = percentiles_ms(values);
  for (const char* key : {"mean", "p50", "p90", "p95", "p99", "p99.9", "max"}) EXPECT_TRUE(ms.contains(key)) << key;
  EXPECT_DOUBLE_EQ(ms["p50"].get<double>(), 500);
  EXPECT_DOUBLE_EQ(ms["p95"].get<double>(), 950);
  EXPECT_DOUBLE_EQ(ms["p99.9"].get<double>(), 999);
  EXPECT_DOUBLE_EQ(ms["max"].get<double>(), 1000);
  EXPECT_DOUBLE_EQ(ms["mean"].get<double>(), 500.5);
}

// Goodput counts the ok requests within both bounds, per second of the run.
TEST(ServeBenchReport, Goodput) {
  RunResult run;
  run.workload = "chat";
  run.concurrency = 8;
  run.request_rate = 2;
  run.seconds = 4;
  run.samples = {streamed(0.1, 0.010, 10), streamed(0.1, 0.030, 10), streamed(0.9, 0.010, 10),
                 streamed(0.1, 0.010, 1)};  // one token: no TPOT, within any bound
  Sample cancelled = streamed(0.1, 0.010, 3);
  cancelled.cancelled = true;
  run.samples.push_back(cancelled);
  EXPECT_NEAR(time_per_output_token(run.samples[1]), 0.030, 1e-12);
  EXPECT_EQ(time_per_output_token(run.samples[3]), 0);

  const Json both = summarize(run, 500, 20);
  EXPECT_EQ(both["goodput"]["requests"], 2);  // the first and the one-token request
  EXPECT_DOUBLE_EQ(both["goodput"]["requests_per_second"].get<double>(), 0.5);
  EXPECT_EQ(both["request_rate"], 2.0);
  EXPECT_EQ(summarize(run, 0, 20)["goodput"]["requests"], 3);   // TTFT not bounded
  EXPECT_EQ(summarize(run, 500, 0)["goodput"]["requests"], 3);  // TPOT not bounded
  EXPECT_EQ(summarize(run, 0, 0)["goodput"]["requests"], 4);    // every ok request
  // TPOT percentiles come from requests with two tokens or more.
  EXPECT_DOUBLE_EQ(both["tpot_ms"]["max"].get<double>(), 30);
  EXPECT_DOUBLE_EQ(both["tpot_ms"]["p50"].get<double>(), 10);
}

TEST(ServeBenchReport, SweepRates) {
  EXPECT_EQ(sweep_rates("0.5,1,2.5", 1, 8), (std::vector<double>{0.5, 1, 2.5}));
  EXPECT_EQ(sweep_rates("ladder", 0.5, 4), (std::vector<double>{0.5, 1, 2, 4}));
  EXPECT_EQ(sweep_rates("ladder", 3, 1), (std::vector<double>{3}));
  EXPECT_THROW(sweep_rates("1,x", 1, 8), Error);
  EXPECT_THROW(sweep_rates("2,1", 1, 8), Error);   // must rise
  EXPECT_THROW(sweep_rates("0,1", 1, 8), Error);   // > 0
  EXPECT_THROW(sweep_rates("", 1, 8), Error);
  EXPECT_THROW(sweep_rates("ladder", 0, 8), Error);
}

// The sweep stops after the first rate past the bound; the report names the highest within it.
TEST(ServeBenchReport, SweepStopsPastTheBound) {
  ServeBenchArgs args;
  args.tpot_p99_ms = 25;
  Json rates = Json::array();
  for (double tpot : {0.010, 0.020, 0.040}) {
    RunResult run;
    run.workload = "chat";
    run.seconds = 1;
    run.request_rate = double(rates.size() + 1);
    run.samples = {streamed(0.1, tpot, 5), streamed(0.1, tpot, 5)};
    const Json summary = summarize(run, 0, args.tpot_p99_ms);
    const bool within = within_tpot_bound(summary, args.tpot_p99_ms);
    rates.push_back({{"request_rate", run.request_rate},
                     {"within_bound", within},
                     {"goodput_rps", summary["goodput"]["requests_per_second"]},
                     {"requests_per_second", summary["requests_per_second"]},
                     {"ttft_ms", summary["ttft_ms"]},
                     {"tpot_ms", summary["tpot_ms"]},
                     {"itl_ms", summary["itl_ms"]}});
    EXPECT_EQ(within, tpot < 0.025);
    if (!within) break;
  }
  ASSERT_EQ(rates.size(), 3u);
  const Json sweep = sweep_result("chat", 16, rates, args);
  EXPECT_EQ(sweep["max_rate_within_bound"], 2.0);
  EXPECT_EQ(sweep["goodput_rps_at_max_rate"], 2.0);
  EXPECT_EQ(sweep["rates"][2]["goodput_rps"], 0.0);  // every request over the TPOT bound
  EXPECT_EQ(sweep["rates"].size(), 3u);
  EXPECT_TRUE(sweep["rates"][0]["tpot_ms"].contains("p99.9"));
}

TEST(ServeBenchReport, IdleGauges) {
  const std::map<std::string, double> vt_busy = {{"vt_requests_running", 2},
                                                 {"vt_requests_waiting", 0},
                                                 {"vt_kv_blocks_used", 12},
                                                 {"vt_state_slots_used", 2},
                                                 {"vt_http_requests_in_flight", 2},
                                                 {"vllm:num_requests_running{engine=\"0\",model_name=\"m\"}", 2}};
  const Json busy = idle_gauges(vt_busy);
  EXPECT_EQ(busy["running"], 2.0);
  EXPECT_EQ(busy["kv_blocks"], 12.0);
  EXPECT_FALSE(gauges_at_zero(busy));
  std::map<std::string, double> vt_idle = vt_busy;
  for (auto& [name, value] : vt_idle) value = 0;
  EXPECT_TRUE(gauges_at_zero(idle_gauges(vt_idle)));
  // Blocks only the prefix cache holds are not a request's.
  vt_idle["vt_kv_blocks_used"] = 5;
  vt_idle["vt_prefix_cache_blocks"] = 5;
  EXPECT_TRUE(gauges_at_zero(idle_gauges(vt_idle)));
  // Another server: vLLM's names, labelled, summed over the labels.
  const std::map<std::string, double> vllm = {{"vllm:num_requests_running{model_name=\"a\"}", 0},
                                              {"vllm:num_requests_waiting{model_name=\"a\"}", 1},
                                              {"vllm:kv_cache_usage_perc{model_name=\"a\"}", 0}};
  const Json other = idle_gauges(vllm);
  EXPECT_EQ(other["waiting"], 1.0);
  EXPECT_TRUE(other["state_slots"].is_null());
  EXPECT_FALSE(gauges_at_zero(other));
  // Nothing reported: nothing to wait for.
  const Json unknown = idle_gauges({});
  EXPECT_TRUE(unknown["running"].is_null());
  EXPECT_TRUE(gauges_at_zero(unknown));
}

}  // namespace
}  // namespace vt::apps::serve_bench
