// Errors of the Jinja engine: every failure (syntax, rendering, raise_exception, an unsupported
// construct) is a TemplateError carrying the template position, so a bad template is a clear message.
#pragma once

#include <string>

#include "core/error.h"

namespace vt::jinja {

// 1-based line and column (columns count code points) in the template source; 0 when unknown.
struct Location {
  int line = 0;
  int column = 0;
};

class TemplateError : public vt::Error {
 public:
  enum class Kind {
    kSyntax,       // the template does not parse
    kRender,       // a runtime error jinja2 would also raise (undefined use, type error, ...)
    kRaised,       // the template called raise_exception(message)
    kUnsupported,  // valid Jinja that vt's engine does not implement
  };

  TemplateError(Kind kind, std::string message, Location location = {})
      : vt::Error(format(kind, message, location)), kind_(kind), message_(std::move(message)),
        location_(location) {}

  Kind kind() const { return kind_; }
  // The message without the position prefix (for raise_exception: exactly the template's text).
  const std::string& message() const { return message_; }
  const Location& location() const { return location_; }

  // The same error placed at `location` (used to attach a position to errors thrown by builtins).
  TemplateError at(Location location) const { return TemplateError(kind_, message_, location); }

 private:
  static std::string format(Kind kind, const std::string& message, Location location) {
    std::string text = "chat template";
    if (location.line > 0) text += vt::str(" line ", location.line, ", column ", location.column);
    switch (kind) {
      case Kind::kSyntax: text += ": syntax error: "; break;
      case Kind::kRender: text += ": "; break;
      case Kind::kRaised: text += ": raise_exception: "; break;
      case Kind::kUnsupported: text += ": unsupported by vt's Jinja engine: "; break;
    }
    return text + message;
  }

  Kind kind_;
  std::string message_;
  Location location_;
};

[[noreturn]] inline void fail_render(std::string message) {
  throw TemplateError(TemplateError::Kind::kRender, std::move(message));
}
[[noreturn]] inline void fail_unsupported(std::string message) {
  throw TemplateError(TemplateError::Kind::kUnsupported, std::move(message));
}

}  // namespace vt::jinja
