// Prometheus text rendering of the engine's gauges and the server's counters.
#include "server/metrics.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace vt::server {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t bucket = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out << name << "_bucket{le=\"" << bounds_[i] << "\"} " << cumulative << "\n";
  }
  cumulative += counts_.back();
  out << name << "_bucket{le=\"+Inf\"} " << cumulative << "\n";
  out << name << "_sum " << sum_ << "\n" << name << "_count " << count_ << "\n";
  return out.str();
}

ServerMetrics::ServerMetrics()
    : time_to_first_token_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      inter_token_latency_({0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1, 2.5, 5}) {}

void ServerMetrics::record_response(int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++responses_[status];
}

namespace {

void metric(std::ostringstream& out, const char* name, const char* type, const char* help, double value) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n" << name << " " << value << "\n";
}

}  // namespace

std::string ServerMetrics::render(const EngineStats& stats, int64_t in_flight) const {
  std::ostringstream out;
  out.precision(12);
  metric(out, "vt_requests_running", "gauge", "Requests admitted to the cache and being processed.", double(stats.running));
  metric(out, "vt_requests_waiting", "gauge", "Requests queued for admission.", double(stats.waiting));
  metric(out, "vt_kv_blocks_used", "gauge", "KV cache blocks in use.", double(stats.cache.blocks_used));
  metric(out, "vt_kv_blocks_total", "gauge", "KV cache blocks in the pool.", double(stats.cache.blocks_total));
  metric(out, "vt_kv_cache_usage_ratio", "gauge", "Fraction of KV cache blocks in use.",
         stats.cache.blocks_total ? double(stats.cache.blocks_used) / double(stats.cache.blocks_total) : 0.0);
  metric(out, "vt_state_slots_used", "gauge", "Recurrent-state slots in use.", double(stats.cache.slots_used));
  metric(out, "vt_state_slots_total", "gauge", "Recurrent-state slots in the pool.", double(stats.cache.slots_total));
  metric(out, "vt_prompt_tokens_total", "counter", "Prompt tokens processed.", double(stats.prompt_tokens_total));
  metric(out, "vt_generation_tokens_total", "counter", "Tokens generated.", double(stats.generation_tokens_total));
  metric(out, "vt_requests_finished_total", "counter", "Requests that ran to a stop or their length.",
         double(stats.requests_finished));
  metric(out, "vt_requests_cancelled_total", "counter", "Requests cancelled (client gone).",
         double(stats.requests_cancelled));
  metric(out, "vt_engine_steps_total", "counter", "Engine steps run.", double(stats.steps));
  metric(out, "vt_preemptions_total", "counter", "Running requests sent back to the queue for want of KV blocks.",
         double(stats.preemptions));
  metric(out, "vt_recomputed_tokens_total", "counter", "Tokens fed again after a preemption.",
         double(stats.recomputed_tokens));
  metric(out, "vt_http_requests_in_flight", "gauge", "Completion requests being served.", double(in_flight));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out << "# HELP vt_http_responses_total HTTP responses by status code.\n# TYPE vt_http_responses_total counter\n";
    for (const auto& [status, count] : responses_) out << "vt_http_responses_total{code=\"" << status << "\"} " << count << "\n";
  }
  out << time_to_first_token_.render("vt_time_to_first_token_seconds",
                                     "Seconds from a request's arrival to its first generated token.");
  out << inter_token_latency_.render("vt_inter_token_latency_seconds",
                                     "Seconds between consecutive generated tokens of a sequence.");
  return out.str();
}

}  // namespace vt::server
