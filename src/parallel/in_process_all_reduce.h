// A simulated tensor-parallel world in one process: ranks are threads and all_reduce sums their
// host f32 partials. Each element is summed in rank order 0, 1, ..., W-1 whichever thread adds
// it, so the result is bit-identical on every rank and from run to run (NCCL's ring order is
// fixed per communicator too, but not rank order; tests compare against TP=1 with a tolerance).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace vt {

// Thrown in the ranks that an abort released (they did not fail themselves).
class WorldAborted : public Error {
 public:
  using Error::Error;
};

class InProcessAllReduce {
 public:
  explicit InProcessAllReduce(int world_size);

  int world_size() const { return world_size_; }
  // Called by every rank's thread with a partial of the same shape (f32, host); returns once each
  // partial holds the sum. Each thread adds its own 1/W of the elements (a reduce-scatter, then
  // an all-gather by copy). Throws WorldAborted when the world was aborted or the ranks' shapes
  // disagree.
  void all_reduce(int rank, const TensorView& partial);
  // Fails every rank waiting now or later (a rank that threw calls it so the others do not hang).
  void abort(const std::string& reason);
  // Re-arms the world after an abort; only while no rank is inside all_reduce.
  void reset();

 private:
  // Waits until all ranks arrive; the last one runs `on_last` (under the lock) before releasing
  // them.
  void barrier(std::unique_lock<std::mutex>& lock, const std::function<void()>& on_last);

  int world_size_;
  std::mutex mutex_;
  std::condition_variable released_;
  int waiting_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::string abort_reason_;
  std::vector<TensorView> partials_;  // by rank, for the current call
  std::vector<float> sum_;
};

}  // namespace vt
