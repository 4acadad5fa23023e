// What each engine step did and how long it took: the wall time, the part spent in the model's
// forwards (GPU work and the copies back, which the host waits for) and the rest on the host
// (scheduling, preparing, sampling on the host, emitting tokens), and its tokens by kind. Summed
// into a histogram for /metrics, and written one JSON line per step to a trace file when asked.
#pragma once

#include <array>
#include <cstdint>
#include <fstream>
#include <string>

namespace vt {

struct StepRecord {
  double start_seconds = 0;  // since the engine started
  double wall_seconds = 0, forward_seconds = 0;
  int64_t sequences = 0, forwards = 0;
  int64_t prefill_tokens = 0;  // prompt tokens, and tokens fed again after a preemption
  int64_t decode_tokens = 0;   // one-token forwards of sequences past their prompt
  int64_t verify_tokens = 0;   // speculative verify items: the last token and its drafts
  double cost = 0;             // the scheduled tokens' cost (engine/step_budget.h)
};

// The steps' totals: a Prometheus-style histogram of the wall time (upper bounds in seconds).
struct StepStats {
  static constexpr std::array<double, 14> kBounds = {0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064,
                                                     0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192};
  std::array<int64_t, kBounds.size() + 1> buckets = {};  // the last: above every bound
  int64_t count = 0;
  double wall_seconds = 0, forward_seconds = 0;
  int64_t prefill_tokens = 0, decode_tokens = 0, verify_tokens = 0;
  void add(const StepRecord& record);
};

// One JSON object a line per step, flushed as written (a crashed server leaves a readable file).
class StepTrace {
 public:
  explicit StepTrace(const std::string& path);  // throws naming the path when it cannot be opened
  void write(const StepRecord& record);

 private:
  std::ofstream out_;
};

}  // namespace vt
