// Tool definitions as the OpenAI API gives them, read for what the output parser needs: a
// parameter's JSON schema, and a parameter's text (Qwen3-Coder XML values are untyped text) turned
// into the JSON value its schema asks for.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

namespace vt::server {

// The function object of a tool ({"type": "function", "function": {...}} or a bare {name, ...}),
// or null when `tools` has no tool of that name.
const nlohmann::json* find_tool_function(const nlohmann::json& tools, std::string_view name);

// The JSON schema of a tool's parameter, or null when the tool or the parameter is unknown.
nlohmann::json parameter_schema(const nlohmann::json& tools, std::string_view tool, std::string_view parameter);

// True when the parameter's values stay text: its schema allows a string, or gives no type (an
// unknown parameter included). Such values are passed on as the model writes them.
bool is_text_parameter(const nlohmann::json& schema);

// The value for a parameter that is not text: the first of its schema's types (integer, number,
// boolean, null, object, array) the text reads as; the text itself (a string) when none fits.
nlohmann::json typed_parameter_value(const nlohmann::json& schema, std::string_view text);

}  // namespace vt::server
