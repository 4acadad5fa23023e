// The agent side of chat requests: tools, tool_choice and response_format checks (OpenAI-style
// 400s naming the field), history in the OpenAI wire form rendered as HF renders its dict form
// (Qwen3.5 template), reasoning detection, and the chat deltas and message built from the parser.
#include <gtest/gtest.h>

#include <filesystem>

#include "server/chat_response.h"
#include "server/validation.h"

namespace vt::server {
namespace {

using Json = nlohmann::ordered_json;

ValidationLimits limits() {
  ValidationLimits result;
  result.model_name = "tiny";
  result.vocab_size = 100;
  result.max_total_tokens = 64;
  return result;
}

const char* kTools = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "list_files"}}])";

std::pair<int, std::string> outcome(const std::string& fields) {
  try {
    parse_completion_request(R"({"messages": [{"role": "user", "content": "hi"}])" + fields + "}", true, limits());
  } catch (const ApiError& error) {
    return {error.status, error.param};
  }
  return {0, ""};
}

TEST(ChatRequest, AgentFieldsParse) {
  const auto request = parse_completion_request(
      std::string(R"({"messages": [{"role": "user", "content": "hi"}], "tools": )") + kTools +
          R"(, "tool_choice": {"type": "function", "function": {"name": "list_files"}}, "parallel_tool_calls": false,
             "reasoning_effort": "low", "chat_template_kwargs": {"enable_thinking": false, "preserve_thinking": true},
             "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}}}})",
      true, limits());
  const ChatOptions& options = request.chat_options;
  EXPECT_EQ(options.tools.size(), 2u);
  EXPECT_EQ(options.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(options.tool_name, "list_files");
  EXPECT_FALSE(options.parallel_tool_calls);
  EXPECT_EQ(options.response_format, ResponseFormat::kJsonSchema);
  EXPECT_EQ(options.json_schema, Json({{"type", "object"}}));
  EXPECT_EQ(options.template_kwargs,
            Json({{"reasoning_effort", "low"}, {"enable_thinking", false}, {"preserve_thinking", true}}));
  EXPECT_EQ(outcome(std::string(R"(, "tools": )") + kTools).first, 0);
  EXPECT_EQ(outcome(R"(, "tools": [], "tool_choice": "none")").first, 0);
  // Every level the OpenAI SDK sends, as vLLM takes them.
  for (const char* level : {"none", "minimal", "low", "medium", "high", "xhigh", "max"})
    EXPECT_EQ(outcome(std::string(R"(, "reasoning_effort": ")") + level + "\"").first, 0) << level;
}

// reasoning_effort sets the template's enable_thinking as vLLM does ("none" off, any other level on),
// unless chat_template_kwargs sets it.
TEST(ChatRequest, ReasoningEffortSetsEnableThinking) {
  auto kwargs = [](const std::string& fields) {
    return parse_completion_request(R"({"messages": [{"role": "user", "content": "hi"}])" + fields + "}", true, limits())
        .chat_options.template_kwargs;
  };
  EXPECT_EQ(kwargs(R"(, "reasoning_effort": "none")"), Json({{"reasoning_effort", "none"}, {"enable_thinking", false}}));
  EXPECT_EQ(kwargs(R"(, "reasoning_effort": "low")"), Json({{"reasoning_effort", "low"}, {"enable_thinking", true}}));
  EXPECT_EQ(kwargs(R"(, "reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": true})"),
            Json({{"reasoning_effort", "none"}, {"enable_thinking", true}}));
  EXPECT_EQ(kwargs(""), Json::object());
}

TEST(ChatRequest, BadAgentFieldsAre400sNamingTheField) {
  const std::string tools = std::string(R"(, "tools": )") + kTools;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"(, "tool_choice": "required")", "tool_choice"},
      {R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})", "tool_choice"},
      {tools + R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})", "tool_choice"},
      {tools + R"(, "tool_choice": "sometimes")", "tool_choice"},
      {tools + R"(, "tool_choice": {"function": {"name": "get_weather"}})", "tool_choice"},
      {R"(, "tools": {"type": "function"})", "tools"},
      {R"(, "tools": [{"type": "function"}])", "tools[0].function"},
      {R"(, "tools": [{"type": "retrieval", "function": {"name": "a"}}])", "tools[0].type"},
      {R"(, "tools": [{"type": "function", "function": {"name": "has space"}}])", "tools[0].function.name"},
      {R"(, "tools": [{"type": "function", "function": {"name": "a", "parameters": []}}])", "tools[0].function.parameters"},
      {R"(, "tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}])",
       "tools[1].function.name"},
      {tools + R"(, "parallel_tool_calls": "yes")", "parallel_tool_calls"},
      {R"(, "response_format": {"type": "yaml"})", "response_format.type"},
      {R"(, "response_format": "json")", "response_format"},
      {R"(, "response_format": {"type": "json_schema"})", "response_format.json_schema"},
      {R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {}}})", "response_format.json_schema.name"},
      {R"(, "reasoning_effort": "extreme")", "reasoning_effort"},
      {R"(, "chat_template_kwargs": [1])", "chat_template_kwargs"},
      {R"(, "chat_template_kwargs": {"messages": []})", "chat_template_kwargs"},
  };
  for (const auto& [fields, param] : cases) {
    const auto [status, named] = outcome(fields);
    EXPECT_EQ(status, 400) << fields;
    EXPECT_EQ(named, param) << fields;
  }
  // History: an assistant's tool call arguments must be a JSON object (or its text).
  try {
    parse_completion_request(R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1"}}]}]})",
                             true, limits());
    FAIL() << "bad arguments accepted";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.param, "messages[1].tool_calls[0].function.arguments");
  }
  EXPECT_EQ(outcome(R"(, "tools": [], "tool_choice": "auto")").first, 400);  // no tools to choose from
}

// Arguments sent as JSON text nest inside a string, where the body's nesting limit does not look:
// text nested deeper than any body may be is refused before it is parsed (copying a tree 400,000
// levels deep overflowed the worker's stack and took the server down, from a body under 1 MB).
TEST(ChatRequest, DeeplyNestedArgumentsTextIsA400) {
  for (const int depth : {33, 400000}) {
    const std::string arguments = "{\\\"a\\\": " + std::string(size_t(depth), '[') + std::string(size_t(depth), ']') + "}";
    try {
      parse_completion_request(R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null,
          "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": ")" +
                                   arguments + R"("}}]}]})",
                               true, limits());
      FAIL() << "arguments nested " << depth << " deep accepted";
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status, 400);
      EXPECT_EQ(error.param, "messages[1].tool_calls[0].function.arguments");
    }
  }
  // Nesting a real call has stays accepted.
  const auto request = parse_completion_request(
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c",
          "type": "function", "function": {"name": "f", "arguments": "{\"a\": [[{\"b\": [1, {\"c\": 2}]}]]}"}}]}]})",
      true, limits());
  EXPECT_EQ(request.messages[1]["tool_calls"][0]["function"]["arguments"], Json::parse(R"({"a": [[{"b": [1, {"c": 2}]}]]})"));
}

// A call without arguments may come back as "" or "null" (LiteLLM sends "" for one): no arguments,
// as vLLM reads them, not a 400 that ends the agent's loop.
TEST(ChatRequest, EmptyArgumentsTextIsNoArguments) {
  for (const char* given : {R"("")", R"("null")", "null"}) {
    const auto request = parse_completion_request(
        std::string(R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "list_files", "arguments": )") +
            given + R"(}}]}, {"role": "tool", "tool_call_id": "c", "content": "a.txt"}]})",
        true, limits());
    EXPECT_EQ(request.messages[1]["tool_calls"][0]["function"]["arguments"], Json::object()) << given;
  }
}

// The OpenAI wire form of an agent loop (arguments as JSON text, null content) renders as HF
// renders the dict form HF users pass (tests/jinja/test_agent_loop_render.py checks that one
// against jinja2 byte for byte).
TEST(ChatRequest, WireFormHistoryRendersAsTheDictForm) {
  const std::filesystem::path folder = std::string(VT_SOURCE_DIR) + "/.cache/chat_templates/qwen3_5";
  if (!std::filesystem::exists(folder / "chat_template.jinja")) GTEST_SKIP() << "run scripts/fetch-chat-templates.sh";
  const jinja::ChatTemplateSet templates = jinja::load_chat_templates(folder);
  const auto request = parse_completion_request(
      std::string(R"({"messages": [{"role": "user", "content": "Weather in Paris?"},
          {"role": "assistant", "content": null, "reasoning_content": "One call.", "tool_calls": [{"id": "call_1",
           "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
          {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
          {"role": "assistant", "content": "It is 18 C."}, {"role": "user", "content": "Thanks"}], "tools": )") +
          kTools + "}",
      true, limits());
  const RenderedPrompt rendered = render_chat_prompt(templates, request.messages, request.chat_options);

  jinja::ChatRequest dict_form;
  dict_form.messages = Json::parse(R"([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "reasoning_content": "One call.", "tool_calls": [{"id": "call_1",
       "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
      {"role": "assistant", "content": "It is 18 C."}, {"role": "user", "content": "Thanks"}])");
  dict_form.tools = Json::parse(kTools);
  dict_form.add_generation_prompt = true;
  const std::string expected =
      jinja::apply_chat_template(jinja::Template(templates.templates.at("default")), templates.special_tokens, dict_form);
  EXPECT_EQ(rendered.text, expected);
  EXPECT_NE(rendered.text.find("<parameter=days>\n2\n</parameter>"), std::string::npos);

  // Thinking on: the output starts as reasoning; off (chat_template_kwargs): it does not.
  OutputParserOptions parser = chat_output_options(request.chat_options, rendered);
  EXPECT_TRUE(parser.reasoning);
  EXPECT_EQ(parser.format, ToolCallFormat::kQwen3Coder);
  ChatOptions off = request.chat_options;
  off.template_kwargs["enable_thinking"] = false;
  EXPECT_FALSE(chat_output_options(off, render_chat_prompt(templates, request.messages, off)).reasoning);
  ChatOptions none = request.chat_options;
  none.tool_choice = ToolChoice::kNone;  // tools hidden from the template and the parser
  const RenderedPrompt hidden = render_chat_prompt(templates, request.messages, none);
  EXPECT_EQ(hidden.text.find("# Tools"), std::string::npos);
  EXPECT_EQ(chat_output_options(none, hidden).format, ToolCallFormat::kNone);
}

TEST(ChatResponse, DeltasAndMessageAsOpenAISendsThem) {
  OutputParserOptions options;
  options.format = ToolCallFormat::kQwen3Coder;
  options.reasoning = true;
  options.tools = Json::parse(kTools);
  const std::string output =
      "Need two.\n</think>\n\nLooking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=list_files>\n</function>\n"
      "</tool_call>";
  for (bool parallel : {true, false}) {
    ChatChoiceOutput choice(options, parallel);
    std::string reasoning, content;
    std::vector<Json> calls;
    for (size_t offset = 0; offset < output.size(); offset += 5) {
      const Json fields = choice.feed(output.substr(offset, 5));
      EXPECT_FALSE(fields.contains("role"));
      if (fields.contains("reasoning_content")) reasoning += fields["reasoning_content"].get<std::string>();
      if (fields.contains("content")) content += fields["content"].get<std::string>();
      if (fields.contains("tool_calls"))
        for (const Json& call : fields["tool_calls"]) calls.push_back(call);
    }
    EXPECT_TRUE(choice.finish().empty());
    EXPECT_EQ(reasoning, "Need two.");
    EXPECT_EQ(content, "Looking.");
    ASSERT_FALSE(calls.empty());
    EXPECT_EQ(calls[0]["index"], 0);
    EXPECT_EQ(calls[0]["type"], "function");
    EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
    EXPECT_EQ(calls[0]["id"].get<std::string>().rfind("call_", 0), 0u);
    const Json message = choice.message();
    EXPECT_EQ(message["content"], "Looking.");
    EXPECT_EQ(message["reasoning_content"], "Need two.");
    ASSERT_EQ(message["tool_calls"].size(), parallel ? 2u : 1u);
    EXPECT_EQ(message["tool_calls"][0]["id"], calls[0]["id"]);  // the streamed id is the message's
    EXPECT_EQ(Json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>()),
              Json({{"city", "Paris"}, {"days", 3}}));
    EXPECT_EQ(choice.finish_reason(FinishReason::kStop), "tool_calls");
    EXPECT_EQ(choice.finish_reason(FinishReason::kLength), "length");
  }
  ChatChoiceOutput plain(OutputParserOptions{}, true);
  plain.feed("Just text.");
  plain.finish();
  EXPECT_EQ(plain.message()["content"], "Just text.");
  EXPECT_FALSE(plain.message().contains("tool_calls"));
  EXPECT_EQ(plain.finish_reason(FinishReason::kStop), "stop");
  // Output that is all reasoning (max_tokens inside <think>): content null, as vLLM sends it; an
  // empty answer without reasoning stays "".
  OutputParserOptions thinking;
  thinking.reasoning = true;
  ChatChoiceOutput cut(thinking, true);
  cut.feed("Still thinking about");
  cut.finish();
  EXPECT_TRUE(cut.message()["content"].is_null());
  EXPECT_EQ(cut.message()["reasoning_content"], "Still thinking about");
  ChatChoiceOutput empty(thinking, true);
  empty.finish();
  EXPECT_EQ(empty.message()["content"], "");
  EXPECT_TRUE(empty.message()["reasoning_content"].is_null());
}

}  // namespace
}  // namespace vt::server
