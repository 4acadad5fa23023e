// Errors that say what went wrong and where. Everything fallible in vt throws vt::Error;
// the CLI catches it, prints the message and exits non-zero.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace vt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates any streamable values: vt::str("layer ", i, ": ", name).
template <typename... Args>
std::string str(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

[[noreturn]] inline void fail(const std::string& message) { throw Error(message); }

}  // namespace vt

// VT_CHECK(cond, parts...) throws vt::Error("parts... [file:line]") when cond is false.
#define VT_CHECK(cond, ...)                                                            \
  do {                                                                                 \
    if (!(cond)) ::vt::fail(::vt::str(__VA_ARGS__, " [", __FILE__, ":", __LINE__, "]")); \
  } while (0)

#define VT_FAIL(...) ::vt::fail(::vt::str(__VA_ARGS__))
