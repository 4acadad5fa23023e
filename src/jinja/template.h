// vt's Jinja engine, public face: parse a template once, render it with variables. Rendering
// matches Python jinja2 as HF transformers configures it for chat templates
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls, raise_exception,
// strftime_now, json.dumps-style tojson). Errors are TemplateError with line and column.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "jinja/value.h"

namespace vt::jinja {

class Template {
 public:
  explicit Template(std::string_view source, const LexerOptions& options = {});

  // Variables are looked up after the template's own assignments and before the globals.
  std::string render(const Object& variables) const;
  std::string render(const nlohmann::ordered_json& variables) const;  // a JSON object

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace vt::jinja
