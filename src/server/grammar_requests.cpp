// What grammar a request asks for, in xgrammar's structural-tag form (plain JSON, no xgrammar).
#include "server/grammar.h"

#include "server/tool_schema.h"

namespace vt::server {
namespace {

using Json = nlohmann::json;

// One call of `function` in the model's format, arguments constrained by its parameters' schema.
// Whitespace runs are kept to one character: a small model cannot wander into endless indentation.
Json call_tag(const Json& function, ToolCallFormat format) {
  const std::string name = function["name"].get<std::string>();
  Json parameters = function.contains("parameters") && function["parameters"].is_object()
                        ? function["parameters"]
                        : Json{{"type", "object"}, {"properties", Json::object()}};
  if (format == ToolCallFormat::kQwen3Coder)
    return {{"type", "tag"},
            {"begin", "<tool_call>\n<function=" + name + ">\n"},
            {"content",
             {{"type", "json_schema"}, {"json_schema", parameters}, {"style", "qwen_xml"}, {"max_whitespace_cnt", 1}}},
            {"end", "</function>\n</tool_call>"}};
  return {{"type", "tag"},
          {"begin", "<tool_call>\n{\"name\": " + Json(name).dump() + ", \"arguments\": "},
          {"content", {{"type", "json_schema"}, {"json_schema", parameters}, {"max_whitespace_cnt", 1}}},
          {"end", "}\n</tool_call>"}};
}

}  // namespace

bool wants_structure(const ChatOptions& options) {
  const bool forced_call =
      options.has_tools() && (options.tool_choice == ToolChoice::kRequired || options.tool_choice == ToolChoice::kNamed);
  return forced_call || options.response_format != ResponseFormat::kText;
}

Json tool_call_structural_tag(const ChatOptions& options, ToolCallFormat format) {
  Json tags = Json::array();
  for (const auto& tool : options.tools) {
    const Json function = Json::parse(tool["function"].dump());
    if (options.tool_choice == ToolChoice::kNamed && function["name"] != options.tool_name) continue;
    tags.push_back(call_tag(function, format));
  }
  const bool one = options.tool_choice == ToolChoice::kNamed || !options.parallel_tool_calls;
  Json body = one && tags.size() == 1 ? tags[0]
                                      : Json{{"type", "tags_with_separator"},
                                             {"tags", tags},
                                             {"separator", "\n"},
                                             {"at_least_one", true},
                                             {"stop_after_first", one}};
  return {{"type", "structural_tag"}, {"format", body}};
}

}  // namespace vt::server
