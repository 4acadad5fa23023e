// /metrics as Prometheus parses it: every line a HELP, a TYPE or a sample whose name and labels are
// legal (vLLM's "vllm:" names included), one TYPE per family before its samples; the prefix
// cache's counters and gauges, and the vllm: metrics routers read, under vLLM's names and labels.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "engine/engine.h"
#include "server/metrics.h"

namespace vt {
namespace {

// Samples by "name{labels}" as written; fails the test on any line the text format does not allow.
std::map<std::string, double> parse_exposition(const std::string& text) {
  static const std::regex kHelp(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)");
  static const std::regex kType(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  static const std::regex kSample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\["\\n])*")(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\["\\n])*")*\})? (\S+))");
  std::map<std::string, double> samples;
  std::set<std::string> typed;
  std::string family;  // the last TYPE's name: its samples follow it
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (std::regex_match(line, match, kHelp)) continue;
    if (std::regex_match(line, match, kType)) {
      family = match[1];
      EXPECT_TRUE(typed.insert(family).second) << "a second TYPE for " << family;
      continue;
    }
    if (!std::regex_match(line, match, kSample)) {
      ADD_FAILURE() << "not a Prometheus line: '" << line << "'";
      continue;
    }
    const std::string name = match[1];
    EXPECT_EQ(name.compare(0, family.size(), family), 0) << name << " outside its family (last TYPE " << family << ")";
    const std::string key = line.substr(0, line.rfind(' '));
    EXPECT_TRUE(samples.emplace(key, std::stod(line.substr(line.rfind(' ') + 1))).second) << "a second " << key;
  }
  return samples;
}

TEST(ServerMetrics, PrefixCacheAndVllmNamesInValidExposition) {
  EngineStats stats;
  stats.running = 3;
  stats.waiting = 2;
  stats.cache.blocks_used = 28;  // 12 of them only the prefix cache's
  stats.cache.blocks_total = 64;
  stats.prefix.queries = 1200;
  stats.prefix.hits = 900;
  stats.prefix.snapshots = 7;
  stats.prefix.snapshot_bytes = 123456789;
  stats.prefix.blocks = 12;
  stats.prefix.bytes = 123456789 + 12 * 1000;
  stats.prefix.evictions = 4;
  server::ServerMetrics metrics("team/model \"a\"");
  metrics.record_response(200);
  metrics.record_time_to_first_token(0.2);
  const std::string text = metrics.render(stats, 1);
  const auto samples = parse_exposition(text);

  EXPECT_EQ(samples.at("vt_prefix_cache_queries_tokens_total"), 1200);
  EXPECT_EQ(samples.at("vt_prefix_cache_hits_tokens_total"), 900);
  EXPECT_EQ(samples.at("vt_prefix_cache_snapshots"), 7);
  EXPECT_EQ(samples.at("vt_prefix_cache_snapshot_bytes"), 123456789);
  EXPECT_EQ(samples.at("vt_prefix_cache_blocks"), 12);
  EXPECT_EQ(samples.at("vt_prefix_cache_bytes"), 123456789 + 12 * 1000);
  EXPECT_EQ(samples.at("vt_prefix_cache_evictions_total"), 4);

  // vLLM labels each engine's metrics with the served model name and the engine's index.
  const std::string labels = R"({engine="0",model_name="team/model \"a\""})";
  EXPECT_EQ(samples.at("vllm:num_requests_running" + labels), 3);
  EXPECT_EQ(samples.at("vllm:num_requests_waiting" + labels), 2);
  EXPECT_EQ(samples.at("vllm:kv_cache_usage_perc" + labels), 0.25);  // a fraction, as vLLM's
  EXPECT_EQ(samples.at("vllm:prefix_cache_queries_total" + labels), 1200);
  EXPECT_EQ(samples.at("vllm:prefix_cache_hits_total" + labels), 900);
  EXPECT_NE(text.find("# TYPE vllm:num_requests_running gauge"), std::string::npos);
  EXPECT_NE(text.find("# TYPE vllm:prefix_cache_hits_total counter"), std::string::npos);
  EXPECT_EQ(samples.at("vt_kv_cache_usage_ratio"), 0.25);
  EXPECT_EQ(samples.at("vt_http_requests_in_flight"), 1);
}

// An engine without blocks (nothing reported yet) reads as an empty cache, not a division by zero.
TEST(ServerMetrics, EmptyPoolIsZeroUsage) {
  const auto samples = parse_exposition(server::ServerMetrics("m").render(EngineStats{}, 0));
  EXPECT_EQ(samples.at(R"(vllm:kv_cache_usage_perc{engine="0",model_name="m"})"), 0);
  EXPECT_EQ(samples.at(R"(vllm:prefix_cache_hits_total{engine="0",model_name="m"})"), 0);
}

}  // namespace
}  // namespace vt
