// Parameter schemas of tool definitions and the typing of XML parameter values by them.
#include "server/tool_schema.h"

#include <cmath>
#include <string>
#include <vector>

namespace vt::server {
namespace {

using Json = nlohmann::json;

// The schema's types in its order: "type" (a name or a list), else those of anyOf/oneOf branches.
std::vector<std::string> schema_types(const Json& schema) {
  std::vector<std::string> types;
  if (!schema.is_object()) return types;
  auto add = [&](const Json& type) {
    if (type.is_string()) types.push_back(type.get<std::string>());
    if (type.is_array())
      for (const Json& item : type)
        if (item.is_string()) types.push_back(item.get<std::string>());
  };
  if (auto type = schema.find("type"); type != schema.end()) {
    add(*type);
    return types;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto branches = schema.find(key);
    if (branches == schema.end() || !branches->is_array()) continue;
    for (const Json& branch : *branches)
      if (branch.is_object() && branch.contains("type")) add(branch["type"]);
  }
  return types;
}

std::string_view trim(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(" \t\r\n") - begin + 1);
}

Json parse_or_discarded(std::string_view text) { return Json::parse(text, nullptr, /*allow_exceptions=*/false); }

std::string lower(std::string_view text) {
  std::string result(text);
  for (char& c : result)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return result;
}

}  // namespace

const Json* find_tool_function(const Json& tools, std::string_view name) {
  if (!tools.is_array()) return nullptr;
  for (const Json& tool : tools) {
    if (!tool.is_object()) continue;
    const Json& function = tool.contains("function") && tool["function"].is_object() ? tool["function"] : tool;
    auto found = function.find("name");
    if (found != function.end() && found->is_string() && found->get<std::string>() == name) return &function;
  }
  return nullptr;
}

Json parameter_schema(const Json& tools, std::string_view tool, std::string_view parameter) {
  const Json* function = find_tool_function(tools, tool);
  if (!function) return nullptr;
  auto parameters = function->find("parameters");
  if (parameters == function->end() || !parameters->is_object()) return nullptr;
  auto properties = parameters->find("properties");
  if (properties == parameters->end() || !properties->is_object()) return nullptr;
  auto schema = properties->find(std::string(parameter));
  return schema == properties->end() ? Json(nullptr) : *schema;
}

bool is_text_parameter(const Json& schema) {
  const std::vector<std::string> types = schema_types(schema);
  if (types.empty()) return true;
  for (const std::string& type : types)
    if (type == "string") return true;
  return false;
}

Json typed_parameter_value(const Json& schema, std::string_view text) {
  const std::string_view value = trim(text);
  for (const std::string& type : schema_types(schema)) {
    if (type == "null" && (value == "null" || value == "None")) return nullptr;
    if (type == "boolean") {
      const std::string word = lower(value);
      if (word == "true" || word == "false") return word == "true";
    }
    if (type == "integer" || type == "number") {
      const Json number = parse_or_discarded(value);
      if (number.is_number_integer()) return number;
      if (number.is_number_float()) {
        const double real = number.get<double>();
        if (type == "number") return number;
        if (std::floor(real) == real && std::fabs(real) < 9.0e15) return int64_t(real);
      }
    }
    if (type == "object" || type == "array") {
      const Json structured = parse_or_discarded(value);
      if (type == "object" && structured.is_object()) return structured;
      if (type == "array" && structured.is_array()) return structured;
    }
  }
  return std::string(text);
}

}  // namespace vt::server
