// The kernel-ran gate: every kernel a launcher meant to launch (its intent) must appear in what
// the GPU ran, exactly as often as intended per step; otherwise the run fails naming the op, the
// backend it selected, and what ran instead. Pure C++ over records, tested without a GPU.
#pragma once

#include <string>
#include <vector>

#include "profile/kernel_recorder.h"
#include "trace/intent.h"

namespace vt::profile {

// The launch intents and timed ops this layer reports on (trace/).
using namespace ::vt::trace;

// "" when every intended kernel ran (intended per step) x steps times in `records`, else the
// failure message (one line per kernel that did not).
std::string kernel_gate_failure(const std::vector<Intent>& step_intents,
                                const std::vector<KernelRecord>& records, int64_t steps);
// Throws vt::Error with kernel_gate_failure()'s message when it is not empty.
void check_kernels_ran(const std::vector<Intent>& step_intents,
                       const std::vector<KernelRecord>& records, int64_t steps);

}  // namespace vt::profile
