// Predicted decode ms/step per batch size, written before a benchmark runs (`vt bench decode
// --predict FILE`) so the report can set prediction, floor and result side by side.
#pragma once

#include "trace/intent.h"

#include <cstdint>
#include <map>
#include <string>

namespace vt::profile {

// The launch intents and timed ops this layer reports on (trace/).
using namespace ::vt::trace;

// Reads FILE: a JSON object {"1": 12.5, "16": 14.0} (or the same under "ms_per_step"), or text
// lines "<batch> <ms_per_step>" with '#' comments. Throws naming the file and the bad entry.
std::map<int64_t, double> read_predictions(const std::string& path);

}  // namespace vt::profile
