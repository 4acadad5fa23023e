// Records every kernel the GPU runs in a window (CUPTI activity API), including kernels launched
// from CUDA graphs, so reports say what actually ran, not what a launcher meant to launch.
#pragma once

#include "trace/intent.h"

#include <cstdint>
#include <string>
#include <vector>

namespace vt::profile {

// The launch intents and timed ops this layer reports on (trace/).
using namespace ::vt::trace;

struct KernelRecord {
  std::string name;  // demangled
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  uint64_t graph_node = 0;  // 0 when not launched from a graph
  uint32_t graph = 0;
};

// One recorder per process at a time (CUPTI's activity buffers are global).
class KernelRecorder {
 public:
  KernelRecorder();
  ~KernelRecorder();
  KernelRecorder(const KernelRecorder&) = delete;
  KernelRecorder& operator=(const KernelRecorder&) = delete;

  void start();  // records from now on
  // Stops recording, flushes CUPTI's buffers and returns the kernels in start order.
  std::vector<KernelRecord> stop();
};

}  // namespace vt::profile
