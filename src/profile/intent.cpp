#include "profile/intent.h"

namespace vt::profile {
namespace {

bool counting = false;
std::map<std::string, int64_t>& counts() {
  static std::map<std::string, int64_t> instance;
  return instance;
}

}  // namespace

void begin_intents() {
  counts().clear();
  counting = true;
}

std::map<std::string, int64_t> end_intents() {
  counting = false;
  return std::move(counts());
}

void intend(const char* kernel) {
  if (counting) ++counts()[kernel];
}

}  // namespace vt::profile
