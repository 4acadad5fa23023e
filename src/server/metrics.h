// Server metrics in the Prometheus text format: engine gauges (running, waiting, KV blocks, state
// slots), token, request and preemption counters, the prefix cache (tokens looked up and found,
// saved states, evictions), speculative decoding (accepted drafts per step: mean and histogram;
// acceptance by draft position) when the engine speculates, HTTP responses by status, and
// histograms of the time to first token and the inter-token latency. Beside them, the vllm:
// gauges and counters that routers and schedulers written for vLLM read (its names and labels).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace vt::server {

// A cumulative histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // "# HELP", "# TYPE", the _bucket lines (le=...), _sum and _count.
  std::string render(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // per bucket, plus +Inf last
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  // `model_name`: the served model's name, the model_name label of the vllm: metrics.
  explicit ServerMetrics(std::string model_name = {});
  void record_response(int status);
  void record_time_to_first_token(double seconds) { time_to_first_token_.observe(seconds); }
  void record_inter_token_latency(double seconds) { inter_token_latency_.observe(seconds); }
  // `in_flight`: HTTP completion requests being served (queued, running or writing).
  std::string render(const EngineStats& stats, int64_t in_flight) const;

 private:
  std::string vllm_labels_;  // {engine="0",model_name="..."}, as vLLM labels one engine's metrics
  Histogram time_to_first_token_;
  Histogram inter_token_latency_;
  mutable std::mutex mutex_;
  std::map<int, uint64_t> responses_;  // HTTP status -> count
};

}  // namespace vt::server
