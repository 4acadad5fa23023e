// A fixed pool of worker threads and parallel_for over an index range. The CPU reference uses it
// for matmuls and per-head loops; VT_NUM_THREADS (default: hardware concurrency) sets the size.
#pragma once

#include <cstdint>
#include <functional>

namespace vt {

int num_threads();
void set_num_threads(int count);

// Calls body(begin, end) on disjoint chunks covering [0, count); returns when all are done.
// Work smaller than min_chunk per thread runs inline.
void parallel_for(int64_t count, int64_t min_chunk,
                  const std::function<void(int64_t begin, int64_t end)>& body);

}  // namespace vt
