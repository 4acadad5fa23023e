// Comma-separated integer lists of the bench commands ("--batch 1,16,64", "--m 1,8,16").
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace vt::apps {

// Each item an integer in [low, high]; errors name the option.
inline std::vector<int64_t> parse_int_list(const std::string& text, const char* option, int64_t low, int64_t high) {
  std::vector<int64_t> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    try {
      values.push_back(std::stoll(item));
    } catch (const std::exception&) {
      VT_FAIL(option, ": '", item, "' is not an integer");
    }
    VT_CHECK(values.back() >= low && values.back() <= high, option, ": ", values.back(), " out of range [", low, ", ",
             high, "]");
  }
  VT_CHECK(!values.empty(), option, ": empty list");
  return values;
}

}  // namespace vt::apps
