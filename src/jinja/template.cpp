// Template: parse at construction, render with the builtins underneath the caller's variables.
#include "jinja/template.h"

#include "jinja/builtins.h"
#include "jinja/parser.h"
#include "jinja/renderer.h"

namespace vt::jinja {

Template::Template(std::string_view source, const LexerOptions& options)
    : body_(std::make_shared<const Body>(parse(source, options))) {}

std::string Template::render(const Object& variables) const {
  Object scope = make_globals();
  for (const auto& [name, value] : variables.entries()) scope.set(name, value);
  Renderer renderer(std::move(scope));
  return renderer.render(*body_);
}

std::string Template::render(const nlohmann::ordered_json& variables) const {
  if (!variables.is_object()) fail_render("template variables must be a JSON object");
  const Value value = Value::from_json(variables);
  return render(value.as_object());
}

}  // namespace vt::jinja
