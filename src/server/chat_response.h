// One chat choice's output as the OpenAI API sends it: the streamed deltas (content,
// reasoning_content, tool_calls with ids, names and argument pieces) and the whole message, both
// from the output parser, and the finish reason ("tool_calls" when the model called tools).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "server/output_parser.h"

namespace vt::server {

class ChatChoiceOutput {
 public:
  // parallel_tool_calls false: calls after the first are dropped.
  ChatChoiceOutput(OutputParserOptions options, bool parallel_tool_calls);

  // Delta fields for the next text (any of content, reasoning_content, tool_calls); an empty
  // object while nothing is decided.
  nlohmann::ordered_json feed(std::string_view text);
  // The output ended: what was held back.
  nlohmann::ordered_json finish();
  // The whole message once finished: {"role": "assistant", "content", "reasoning_content",
  // "tool_calls"} (content null when there are calls and no text; no tool_calls key without calls).
  nlohmann::ordered_json message() const;
  // "tool_calls" when the model called tools and stopped by itself; else the engine's reason.
  std::string finish_reason(FinishReason engine_reason) const;
  bool reasoning_done() const { return parser_.reasoning_done(); }

 private:
  nlohmann::ordered_json delta_json(const OutputDelta& delta);

  OutputParser parser_;
  bool parallel_tool_calls_;
  ParsedOutput parsed_;
  std::vector<std::string> ids_;  // per call index
};

// "call_" and 24 random hex digits.
std::string new_tool_call_id();

}  // namespace vt::server
