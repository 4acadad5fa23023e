// The in-process all-reduce: two barriers per call (partials posted; sums written).
#include "parallel/in_process_all_reduce.h"

#include <cstring>

#include "core/error.h"

namespace vt {

InProcessAllReduce::InProcessAllReduce(int world_size)
    : world_size_(world_size), partials_(world_size) {
  VT_CHECK(world_size >= 1, "in-process world: size ", world_size, " must be at least 1");
}

void InProcessAllReduce::barrier(std::unique_lock<std::mutex>& lock,
                                 const std::function<void()>& on_last) {
  if (aborted_) throw WorldAborted(str("all-reduce: world aborted (", abort_reason_, ")"));
  const uint64_t generation = generation_;
  if (++waiting_ == world_size_) {
    waiting_ = 0;
    ++generation_;
    if (on_last) on_last();
    released_.notify_all();
  } else {
    released_.wait(lock, [&] { return generation_ != generation || aborted_; });
  }
  if (aborted_) throw WorldAborted(str("all-reduce: world aborted (", abort_reason_, ")"));
}

void InProcessAllReduce::all_reduce(int rank, const TensorView& partial) {
  VT_CHECK(rank >= 0 && rank < world_size_, "all-reduce: rank ", rank, " outside the world of ",
           world_size_);
  VT_CHECK(partial.device == Device::kCpu && partial.dtype == DType::kF32,
           "all-reduce: the in-process world sums host f32 tensors");
  if (world_size_ == 1) return;
  std::unique_lock lock(mutex_);
  partials_[rank] = partial;
  barrier(lock, [this] {
    for (const TensorView& other : partials_)
      if (other.shape != partials_[0].shape) {
        aborted_ = true;
        abort_reason_ = str("ranks disagree on the shape: ", partials_[0].shape.str(), " vs ",
                            other.shape.str());
        return;
      }
    sum_.resize(size_t(partials_[0].numel()));
  });
  lock.unlock();

  const int64_t count = partial.numel();
  const int64_t begin = count * rank / world_size_, end = count * (rank + 1) / world_size_;
  for (int64_t i = begin; i < end; ++i) {
    float sum = partials_[0].f32()[i];
    for (int r = 1; r < world_size_; ++r) sum += partials_[r].f32()[i];
    sum_[size_t(i)] = sum;
  }

  lock.lock();
  barrier(lock, nullptr);
  lock.unlock();
  // sum_ is rewritten only after the next call's first barrier, which every rank must reach.
  std::memcpy(partial.data, sum_.data(), partial.bytes());
}

void InProcessAllReduce::abort(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (!aborted_) abort_reason_ = reason;
  aborted_ = true;
  released_.notify_all();
}

void InProcessAllReduce::reset() {
  std::lock_guard lock(mutex_);
  aborted_ = false;
  abort_reason_.clear();
  waiting_ = 0;
}

}  // namespace vt
