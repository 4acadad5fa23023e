// Stop-string matching with hold-back of a possible partial match at the end of the text.
#include "engine/stop_strings.h"

#include <algorithm>

#include "core/error.h"

namespace vt {

StopStringFilter::StopStringFilter(std::vector<std::string> stop_strings) : stop_strings_(std::move(stop_strings)) {
  for (const std::string& stop : stop_strings_) VT_CHECK(!stop.empty(), "stop strings must not be empty");
}

StopStringFilter::Result StopStringFilter::push(const std::string& text) {
  Result result;
  if (stopped_) return result;
  held_ += text;
  // The earliest complete stop string wins.
  size_t earliest = std::string::npos;
  for (const std::string& stop : stop_strings_) earliest = std::min(earliest, held_.find(stop));
  if (earliest != std::string::npos) {
    result.text = held_.substr(0, earliest);
    result.stopped = stopped_ = true;
    held_.clear();
    return result;
  }
  // Keep the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& stop : stop_strings_) {
    for (size_t length = std::min(stop.size() - 1, held_.size()); length > keep; --length) {
      if (held_.compare(held_.size() - length, length, stop, 0, length) == 0) {
        keep = length;
        break;
      }
    }
  }
  result.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return result;
}

std::string StopStringFilter::finish() {
  std::string rest;
  rest.swap(held_);
  return stopped_ ? std::string() : rest;
}

}  // namespace vt
