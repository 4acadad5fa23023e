// The agent fields of a chat request (tools, tool_choice, parallel_tool_calls, response_format,
// chat_template_kwargs, reasoning_effort), the messages an agent loop sends (assistant tool_calls,
// tool results, reasoning) in the form chat templates read, and the prompt they render to.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "jinja/chat_template.h"
#include "server/output_parser.h"

namespace vt::server {

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

enum class ResponseFormat { kText, kJsonObject, kJsonSchema };

struct ChatOptions {
  nlohmann::ordered_json tools;  // the request's tool definitions (checked); null: none
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_name;  // kNamed: the function the model must call
  bool parallel_tool_calls = true;
  ResponseFormat response_format = ResponseFormat::kText;
  nlohmann::ordered_json json_schema;  // kJsonSchema: the schema
  // Variables for the chat template: chat_template_kwargs over a top-level reasoning_effort.
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();

  bool has_tools() const { return tools.is_array() && !tools.empty(); }
  // Tools reach the template and the output parser (tool_choice none hides them).
  bool tools_enabled() const { return has_tools() && tool_choice != ToolChoice::kNone; }
};

// Reads the agent fields of a chat body; throws ApiError (400, naming the field) on bad values.
ChatOptions parse_chat_options(const nlohmann::ordered_json& body);

// The template's form of a checked message's agent fields: an assistant's tool_calls (arguments
// as a JSON object, as templates iterate them) and reasoning_content, a tool result's
// tool_call_id and name. `where` names the message in errors.
void add_message_agent_fields(const nlohmann::ordered_json& message, const std::string& role, const std::string& where,
                              nlohmann::ordered_json& out);

struct RenderedPrompt {
  std::string text;
  std::string template_source;  // the template used (it tells the tool-call format)
  // The text's end that the messages rendered without the generation prompt leave out (empty
  // when that render is not a prefix of text): where a next turn's history stops matching.
  std::string generation_prompt;
};

// The chat template (HF's choice: "tool_use" when tools are on and it exists) over the messages,
// tools and template variables, with the generation prompt. Throws ApiError 400 when the
// template refuses the conversation.
RenderedPrompt render_chat_prompt(const jinja::ChatTemplateSet& templates, const nlohmann::ordered_json& messages,
                                  const ChatOptions& options);

// How a chat output is parsed: reasoning when the prompt opened `<think>`; with tools on, the
// template's tool-call format (Hermes JSON when the template shows none) typed by the tools.
OutputParserOptions chat_output_options(const ChatOptions& options, const RenderedPrompt& prompt);

}  // namespace vt::server
