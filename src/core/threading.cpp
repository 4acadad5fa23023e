#include "core/threading.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace vt {
namespace {

// Workers wait for a generation counter to change, run their chunk, and report back.
class ThreadPool {
 public:
  explicit ThreadPool(int count) {
    for (int i = 1; i < count; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
  }
  ~ThreadPool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      ++generation_;
    }
    wake_.notify_all();
    for (auto& worker : workers_) worker.join();
  }
  int size() const { return int(workers_.size()) + 1; }

  void run(int64_t count, const std::function<void(int64_t, int64_t)>& body, int parts) {
    std::unique_lock run_lock(run_mutex_);  // one parallel region at a time
    {
      std::lock_guard lock(mutex_);
      body_ = &body;
      count_ = count;
      parts_ = parts;
      pending_ = parts - 1;
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    run_part(0);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    body_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void run_part(int part) {
    int64_t begin = count_ * part / parts_, end = count_ * (part + 1) / parts_;
    try {
      if (begin < end) (*body_)(begin, end);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
  void worker_loop(int index) {
    uint64_t seen = 0;
    while (true) {
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (stopping_) return;
        if (index >= parts_) continue;
      }
      run_part(index);
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_, run_mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t count_ = 0;
  int parts_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
};

int default_threads() {
  if (const char* env = std::getenv("VT_NUM_THREADS")) {
    int value = std::atoi(env);
    if (value > 0) return value;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::unique_ptr<ThreadPool>& pool() {
  static std::unique_ptr<ThreadPool> instance = std::make_unique<ThreadPool>(default_threads());
  return instance;
}

thread_local bool in_parallel_region = false;

}  // namespace

int num_threads() { return pool()->size(); }

void set_num_threads(int count) { pool() = std::make_unique<ThreadPool>(std::max(1, count)); }

void parallel_for(int64_t count, int64_t min_chunk,
                  const std::function<void(int64_t, int64_t)>& body) {
  if (count <= 0) return;
  int64_t parts = std::min<int64_t>(num_threads(), (count + min_chunk - 1) / std::max<int64_t>(min_chunk, 1));
  if (parts <= 1 || in_parallel_region) {
    body(0, count);
    return;
  }
  auto guarded = [&](int64_t begin, int64_t end) {
    in_parallel_region = true;
    body(begin, end);
    in_parallel_region = false;
  };
  pool()->run(count, guarded, int(parts));
}

}  // namespace vt
