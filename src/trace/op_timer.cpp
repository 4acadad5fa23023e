#include "trace/op_timer.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>

#include "core/error.h"

namespace vt::trace {
namespace {

std::mutex ops_mutex;
std::vector<TimedOp> recorded_ops;

}  // namespace

namespace detail {

std::atomic<bool> op_timing{false};

void record_op(const TimedOp& op) {
  std::lock_guard lock(ops_mutex);
  recorded_ops.push_back(op);
}

}  // namespace detail

uint64_t steady_now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

OpRecorder::~OpRecorder() {
  if (running_) stop();
}

void OpRecorder::start() {
  std::lock_guard lock(ops_mutex);
  VT_CHECK(!detail::op_timing.load(), "OpRecorder: another recorder is running");
  running_ = true;
  recorded_ops.clear();
  recorded_ops.reserve(1 << 16);
  detail::op_timing.store(true);
}

std::vector<TimedOp> OpRecorder::stop() {
  detail::op_timing.store(false);
  running_ = false;
  std::lock_guard lock(ops_mutex);
  return std::move(recorded_ops);
}

double measure_memcpy_bandwidth(size_t bytes) {
  VT_CHECK(bytes >= 4096, "measure_memcpy_bandwidth: ", bytes, " bytes is too small to time");
  auto source = std::make_unique<char[]>(bytes), destination = std::make_unique<char[]>(bytes);
  std::memset(source.get(), 1, bytes);
  std::memset(destination.get(), 2, bytes);  // touch every page before timing
  double best_seconds = 1e30;
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(destination.get(), source.get(), bytes);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best_seconds = std::min(best_seconds, seconds);
    source[round] = destination[bytes - 1 - round];  // keep the copies observable
  }
  return 2.0 * double(bytes) / best_seconds / 1e9;
}

}  // namespace vt::trace
