// Intent records: each CUDA launcher states the kernel it meant to launch. Compared with what
// CUPTI saw run (profile/kernel_recorder.h), they make "the selected kernel ran" a checked fact.
#pragma once

#include <map>
#include <string>

namespace vt::profile {

// Starts counting intents (clearing earlier ones); launchers call intend() while enabled.
void begin_intents();
// Stops counting and returns kernel name -> launches intended since begin_intents().
std::map<std::string, int64_t> end_intents();
// Called by every launcher with its kernel's name; free when not counting.
void intend(const char* kernel);

}  // namespace vt::profile
