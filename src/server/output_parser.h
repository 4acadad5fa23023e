// The streaming parser of a model's raw output: reasoning (up to `</think>`), content, and tool
// calls in the family's formats (Qwen3-Coder XML, Hermes JSON), with XML parameter values typed by
// the tool's JSON schema. The server and `vt parse-output` feed it the same way; what it yields,
// joined, does not depend on how the output was cut into pieces. No engine or HTTP here.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace vt::server {

enum class ToolCallFormat {
  kNone,        // tool-call tags are plain content
  kQwen3Coder,  // <tool_call><function=NAME><parameter=P>value</parameter>...</function></tool_call>
  kHermes,      // <tool_call>{"name": ..., "arguments": {...}}</tool_call>
};

// "qwen3_coder", "hermes", "none"; throws vt::Error for other names.
ToolCallFormat parse_tool_call_format(std::string_view name);
const char* tool_call_format_name(ToolCallFormat format);
// The format a chat template teaches its model: Qwen3-Coder XML when it writes `<function=`,
// Hermes JSON when it writes `<tool_call>` otherwise, else kNone.
ToolCallFormat detect_tool_call_format(std::string_view chat_template);
// True when a rendered prompt ends by opening `<think>` (the output starts inside reasoning).
bool prompt_opens_reasoning(std::string_view prompt);

struct OutputParserOptions {
  ToolCallFormat format = ToolCallFormat::kNone;
  // The output starts inside reasoning (the prompt opened `<think>`). Either way an output that
  // itself begins with `<think>` starts reasoning.
  bool reasoning = false;
  // OpenAI tool definitions ([{"type": "function", "function": {name, parameters}}]): the
  // parameter types of XML values. A parameter the schema does not type stays a string.
  nlohmann::json tools = nlohmann::json::array();
};

// A piece of one tool call. The call's first piece names it; `arguments` pieces, joined, are the
// call's arguments as a JSON object text.
struct ToolCallDelta {
  int index = 0;
  std::string name;  // set on the call's first piece only
  std::string arguments;
};

struct OutputDelta {
  std::string reasoning, content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options);

  // Takes the next bytes of output (any cut, even inside a UTF-8 character) and returns what is
  // decided so far; text that may still turn out to be a tag is held back.
  OutputDelta feed(std::string_view text);
  // The output ended (stop, length, ...): flushes what was held back and closes an unfinished
  // call (its arguments so far, closed as a JSON object; a call not yet named is dropped).
  OutputDelta finish();

  bool saw_tool_call() const { return calls_ > 0; }
  // True once reasoning has ended (or never began): constrained decoding may start.
  bool reasoning_done() const { return state_ != State::kReasoningStart && state_ != State::kReasoning; }

 private:
  enum class State {
    kReasoningStart,  // before any reasoning text: leading whitespace and a `<think>` are dropped
    kReasoning,
    kContentStart,    // before any content: an opening `<think>` starts reasoning
    kContent,
    kToolCall,        // inside <tool_call>, between functions
    kFunctionName,    // after `<function=`
    kFunctionBody,    // between parameters
    kParameterName,   // after `<parameter=`
    kParameterValue,
    kHermesBody,      // inside <tool_call>, the JSON object
  };
  // Runs the state machine over buffer_ as far as it can; `end`: no more text comes.
  void run(OutputDelta& delta, bool end);
  bool step(OutputDelta& delta, bool end);  // one move; false when it needs more text
  // Emits text to reasoning or content, holding back a trailing whitespace run (dropped if a tag
  // follows, emitted otherwise).
  void emit_text(std::string& channel, std::string& held, std::string_view text);
  void open_call(OutputDelta& delta, const std::string& name);
  void begin_parameter(OutputDelta& delta, const std::string& name);
  void end_parameter(OutputDelta& delta, std::string_view raw_tail);  // the value's rest, up to its closing tag
  void close_call(OutputDelta& delta);
  void finish_hermes(OutputDelta& delta, std::string_view body);

  OutputParserOptions options_;
  ToolCallFormat format_;
  State state_;
  std::string incomplete_;  // a UTF-8 character's first bytes, waiting for the rest
  std::string buffer_;      // decoded text not yet consumed
  std::string held_reasoning_, held_content_;  // trailing whitespace held back
  bool any_content_ = false;  // content emitted (a `<think>` after it is content)
  int calls_ = 0;             // calls opened so far (the next call's index)
  bool call_open_ = false;
  std::string call_name_;
  int call_parameters_ = 0;
  std::string parameter_name_;
  bool parameter_streams_ = false;  // a string value, sent as it comes
  bool value_started_ = false;      // the value's first character is seen (a leading newline dropped)
  std::string value_;               // a non-string value, whole
};

// Everything an output parsed to, as joined deltas.
struct ParsedOutput {
  std::string reasoning, content;
  struct Call {
    std::string name, arguments;
  };
  std::vector<Call> tool_calls;
  void add(const OutputDelta& delta);
  // {"reasoning_content": str|null, "content": str|null, "tool_calls": [{"type": "function",
  // "function": {"name", "arguments"}}]}: empty strings are null.
  nlohmann::ordered_json to_json() const;
};

// The whole output through one parser, fed `chunk_bytes` bytes at a time (0: at once).
ParsedOutput parse_output(const OutputParserOptions& options, std::string_view output, size_t chunk_bytes = 0);

}  // namespace vt::server
