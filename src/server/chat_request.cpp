// Checks of the agent fields of /v1/chat/completions and the prompt they render to.
#include "server/chat_request.h"

#include <cctype>

#include "server/validation.h"

namespace vt::server {
namespace {

using Json = nlohmann::ordered_json;

// OpenAI's rule for function names: letters, digits, '_', '-' (and '.'), at most 64.
bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

Json parse_tools(const Json& tools) {
  if (!tools.is_array()) invalid("tools", "'tools' must be a list of {\"type\": \"function\", \"function\": {...}}");
  Json checked = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const Json& tool = tools[i];
    if (!tool.is_object()) invalid(where, where + " must be an object");
    const Json* type = field(tool, "type");
    if (!type || *type != "function") invalid(where + ".type", where + ".type must be \"function\"");
    const Json* function = field(tool, "function");
    if (!function || !function->is_object()) invalid(where + ".function", where + ".function must be an object");
    const Json* name = field(*function, "name");
    if (!name || !name->is_string() || !valid_function_name(name->get<std::string>()))
      invalid(where + ".function.name",
              where + ".function.name must be 1 to 64 letters, digits, '_', '-' or '.'");
    for (const Json& other : checked)
      if (other["function"]["name"] == *name)
        invalid(where + ".function.name", "tool name '" + name->get<std::string>() + "' is given twice");
    if (const Json* parameters = field(*function, "parameters"); parameters && !parameters->is_object())
      invalid(where + ".function.parameters", where + ".function.parameters must be a JSON schema object");
    if (const Json* description = field(*function, "description"); description && !description->is_string())
      invalid(where + ".function.description", where + ".function.description must be a string");
    checked.push_back(tool);
  }
  return checked;
}

void parse_tool_choice(const Json& body, ChatOptions& options) {
  const Json* choice = field(body, "tool_choice");
  if (!choice) {
    options.tool_choice = options.has_tools() ? ToolChoice::kAuto : ToolChoice::kNone;
    return;
  }
  if (choice->is_string()) {
    const std::string mode = choice->get<std::string>();
    if (mode == "auto") options.tool_choice = ToolChoice::kAuto;
    else if (mode == "none") options.tool_choice = ToolChoice::kNone;
    else if (mode == "required") options.tool_choice = ToolChoice::kRequired;
    else invalid("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  } else if (choice->is_object()) {
    const Json* type = field(*choice, "type");
    const Json* function = field(*choice, "function");
    const Json* name = function && function->is_object() ? field(*function, "name") : nullptr;
    if (!type || *type != "function" || !name || !name->is_string())
      invalid("tool_choice", "a named 'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    options.tool_choice = ToolChoice::kNamed;
    options.tool_name = name->get<std::string>();
  } else {
    invalid("tool_choice", "'tool_choice' must be a string or an object");
  }
  if (options.tool_choice == ToolChoice::kNone) return;
  if (!options.has_tools())
    invalid("tool_choice", "'tool_choice' is only allowed when 'tools' are given");
  if (options.tool_choice != ToolChoice::kNamed) return;
  for (const Json& tool : options.tools)
    if (tool["function"]["name"] == options.tool_name) return;
  invalid("tool_choice", "tool_choice names the function '" + options.tool_name + "', which is not in 'tools'");
}

void parse_response_format(const Json& body, ChatOptions& options) {
  const Json* format = field(body, "response_format");
  if (!format) return;
  const Json* type = format->is_object() ? field(*format, "type") : nullptr;
  if (!type || !type->is_string())
    invalid("response_format", "'response_format' must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}");
  const std::string kind = type->get<std::string>();
  if (kind == "text") return;
  if (kind == "json_object") {
    options.response_format = ResponseFormat::kJsonObject;
    return;
  }
  if (kind != "json_schema")
    invalid("response_format.type", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
  const Json* spec = field(*format, "json_schema");
  if (!spec || !spec->is_object()) invalid("response_format.json_schema", "'response_format.json_schema' must be an object");
  const Json* name = field(*spec, "name");
  if (!name || !name->is_string() || !valid_function_name(name->get<std::string>()))
    invalid("response_format.json_schema.name",
            "'response_format.json_schema.name' must be 1 to 64 letters, digits, '_', '-' or '.'");
  const Json* schema = field(*spec, "schema");
  if (schema && !schema->is_object() && !schema->is_boolean())
    invalid("response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON schema object");
  options.response_format = ResponseFormat::kJsonSchema;
  options.json_schema = schema ? *schema : Json::object();
}

}  // namespace

ChatOptions parse_chat_options(const Json& body) {
  ChatOptions options;
  if (const Json* tools = field(body, "tools")) {
    options.tools = parse_tools(*tools);
    if (options.tools.empty()) options.tools = nullptr;
  }
  parse_tool_choice(body, options);
  if (const Json* parallel = field(body, "parallel_tool_calls")) {
    if (!parallel->is_boolean()) invalid("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    options.parallel_tool_calls = parallel->get<bool>();
  }
  parse_response_format(body, options);
  if (const Json* effort = field(body, "reasoning_effort")) {
    if (!effort->is_string()) invalid("reasoning_effort", "'reasoning_effort' must be a string");
    const std::string level = effort->get<std::string>();
    // The OpenAI SDK's levels (xhigh, max: its newest), all of which vLLM takes.
    if (level != "none" && level != "minimal" && level != "low" && level != "medium" && level != "high" &&
        level != "xhigh" && level != "max")
      invalid("reasoning_effort", "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, max");
    options.template_kwargs["reasoning_effort"] = level;
  }
  if (const Json* kwargs = field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) invalid("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (const auto& [key, value] : kwargs->items()) {
      // The template's own inputs come from the request's fields, not from here.
      if (key == "messages" || key == "tools" || key == "add_generation_prompt" || key == "documents")
        invalid("chat_template_kwargs", "chat_template_kwargs must not set '" + key + "'");
      options.template_kwargs[key] = value;
    }
  }
  // As vLLM: a reasoning_effort turns the template's thinking on, "none" off, unless
  // chat_template_kwargs says (Qwen's templates read enable_thinking, not reasoning_effort).
  if (options.template_kwargs.contains("reasoning_effort") && !options.template_kwargs.contains("enable_thinking"))
    options.template_kwargs["enable_thinking"] = options.template_kwargs["reasoning_effort"] != "none";
  return options;
}

void add_message_agent_fields(const Json& message, const std::string& role, const std::string& where, Json& out) {
  if (role == "assistant") {
    for (const char* name : {"reasoning_content", "reasoning"}) {
      const Json* reasoning = field(message, name);
      if (!reasoning) continue;
      if (!reasoning->is_string()) invalid(where + "." + name, where + "." + name + " must be a string");
      out["reasoning_content"] = *reasoning;
      break;
    }
    const Json* calls = field(message, "tool_calls");
    if (!calls) return;
    if (!calls->is_array()) invalid(where + ".tool_calls", where + ".tool_calls must be a list");
    Json converted = Json::array();
    for (size_t i = 0; i < calls->size(); ++i) {
      const std::string at = where + ".tool_calls[" + std::to_string(i) + "]";
      const Json& call = (*calls)[i];
      const Json* function = call.is_object() ? field(call, "function") : nullptr;
      const Json* name = function && function->is_object() ? field(*function, "name") : nullptr;
      if (!name || !name->is_string()) invalid(at, at + " must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
      Json arguments = Json::object();
      // "" and "null" are no arguments, as vLLM reads them (clients send "" for a call without
      // any, e.g. LiteLLM for an Anthropic tool_use with an empty input).
      if (const Json* given = field(*function, "arguments"); given && *given != "" && *given != "null") {
        // The wire form is a JSON text; templates iterate an object, as HF users pass it. The
        // body's nesting limit does not see inside the text: it is held to the same limit here.
        if (given->is_string() && nesting_exceeds(given->get_ref<const std::string&>(), kMaxJsonNesting))
          invalid(at + ".function.arguments",
                  at + ".function.arguments nests deeper than " + std::to_string(kMaxJsonNesting) + " levels");
        arguments = given->is_string() ? Json::parse(given->get<std::string>(), nullptr, false) : *given;
        if (!arguments.is_object()) invalid(at + ".function.arguments", at + ".function.arguments must be a JSON object (or its text)");
      }
      Json entry = {{"type", "function"}, {"function", {{"name", *name}, {"arguments", arguments}}}};
      if (const Json* id = field(call, "id"); id && id->is_string()) entry["id"] = *id;
      converted.push_back(std::move(entry));
    }
    out["tool_calls"] = std::move(converted);
  } else if (role == "tool") {
    for (const char* name : {"tool_call_id", "name"}) {
      const Json* value = field(message, name);
      if (!value) continue;
      if (!value->is_string()) invalid(where + "." + name, where + "." + name + " must be a string");
      out[name] = *value;
    }
  }
}

RenderedPrompt render_chat_prompt(const jinja::ChatTemplateSet& templates, const Json& messages, const ChatOptions& options) {
  jinja::ChatRequest chat;
  chat.messages = messages;
  chat.add_generation_prompt = true;
  if (options.tools_enabled()) chat.tools = options.tools;
  chat.extra = options.template_kwargs;
  RenderedPrompt prompt;
  try {
    prompt.template_source = jinja::select_chat_template(templates, "", !chat.tools.is_null());
    const jinja::Template chat_template(prompt.template_source);
    prompt.text = jinja::apply_chat_template(chat_template, templates.special_tokens, chat);
    chat.add_generation_prompt = false;
    const std::string history = jinja::apply_chat_template(chat_template, templates.special_tokens, chat);
    if (history.size() < prompt.text.size() && prompt.text.compare(0, history.size(), history) == 0)
      prompt.generation_prompt = prompt.text.substr(history.size());
  } catch (const std::exception& error) {
    throw ApiError(400, std::string("the chat template rejected these messages: ") + error.what(), "messages");
  }
  return prompt;
}

OutputParserOptions chat_output_options(const ChatOptions& options, const RenderedPrompt& prompt) {
  OutputParserOptions parser;
  parser.reasoning = prompt_opens_reasoning(prompt.text);
  if (!options.tools_enabled()) return parser;
  parser.format = detect_tool_call_format(prompt.template_source);
  if (parser.format == ToolCallFormat::kNone) parser.format = ToolCallFormat::kHermes;
  parser.tools = options.tools;
  return parser;
}

}  // namespace vt::server
