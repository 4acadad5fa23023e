// Stop strings over streamed text: holds back the tail that could still begin a stop string, so
// no client ever sees text past (or the start of) the stop string that ends a request.
#pragma once

#include <string>
#include <vector>

namespace vt {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stop_strings);

  struct Result {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string was found; `text` ends just before it
  };
  // Appends generated text; returns what can be emitted.
  Result push(const std::string& text);
  // The held-back tail at the end of generation (no stop string can complete any more).
  std::string finish();

 private:
  std::vector<std::string> stop_strings_;
  std::string held_;  // text not yet emitted
  bool stopped_ = false;
};

}  // namespace vt
