// Timed ops of the CPU backend: while an OpRecorder runs, each op call (ops/ops.cpp) records its
// name, group, shape, bytes, FLOPs and steady_clock interval; otherwise a timer costs one branch.
// The CPU counterpart of CUPTI's kernel records, fed to the same step report.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "trace/intent.h"

namespace vt::trace {

struct TimedOp {
  const char* op = "";  // a string literal
  OpGroup group = OpGroup::kOther;
  std::array<int64_t, 4> shape = {};
  double bytes = 0, flops = 0;
  uint64_t start_ns = 0, end_ns = 0;  // steady_clock
};

uint64_t steady_now_ns();

namespace detail {
extern std::atomic<bool> op_timing;
void record_op(const TimedOp& op);
}  // namespace detail

// Records the ops called between start() and stop() on any thread. One recorder at a time.
class OpRecorder {
 public:
  OpRecorder() = default;
  ~OpRecorder();
  OpRecorder(const OpRecorder&) = delete;
  OpRecorder& operator=(const OpRecorder&) = delete;

  void start();
  std::vector<TimedOp> stop();  // in call order

 private:
  bool running_ = false;
};

// Times the enclosing scope as one op call when a recorder runs.
class ScopedOpTimer {
 public:
  ScopedOpTimer(const char* op, OpGroup group, const std::array<int64_t, 4>& shape, double bytes,
                double flops)
      : active_(detail::op_timing.load(std::memory_order_relaxed)) {
    if (!active_) return;
    op_ = {op, group, shape, bytes, flops, steady_now_ns(), 0};
  }
  ~ScopedOpTimer() {
    if (!active_) return;
    op_.end_ns = steady_now_ns();
    detail::record_op(op_);
  }
  ScopedOpTimer(const ScopedOpTimer&) = delete;
  ScopedOpTimer& operator=(const ScopedOpTimer&) = delete;

 private:
  bool active_;
  TimedOp op_;
};

// Host memory bandwidth in GB/s (bytes read + written by memcpy over `bytes`-sized buffers, best
// of a few rounds): the CPU's floor reference.
double measure_memcpy_bandwidth(size_t bytes = size_t(64) << 20);

}  // namespace vt::trace
