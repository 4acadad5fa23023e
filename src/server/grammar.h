// Structured output: response_format json_object / json_schema and tool_choice required / named
// become a per-request token rule (engine/token_constraint.h) from xgrammar's compiled grammars.
// The rule waits for reasoning to end (`</think>` in the output) when the prompt opened it, so
// the reasoning stays free and only the answer is constrained.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/token_constraint.h"
#include "server/chat_request.h"
#include "server/output_parser.h"
#include "tokenizer/tokenizer.h"

namespace vt::server {

using ConstraintFactory = std::function<std::unique_ptr<TokenConstraint>()>;

// xgrammar's structural tag ({"type": "structural_tag", "format": ...}) for tool_choice required
// or named: the tool-call blocks of `format` (Qwen3-Coder XML, Hermes JSON) for the allowed tools,
// arguments by their schemas; one call when parallel_tool_calls is false or a tool is named.
nlohmann::json tool_call_structural_tag(const ChatOptions& options, ToolCallFormat format);

// True when the request asks for a structure (a JSON response or a forced tool call).
bool wants_structure(const ChatOptions& options);

class StructuredOutput {
 public:
  // The vocabulary as xgrammar reads it (special tokens never match text); `stop_ids` end a
  // finished grammar. vocab_size: the model's logits width (>= the tokenizer's).
  StructuredOutput(const Tokenizer& tokenizer, int64_t vocab_size, std::vector<int32_t> stop_ids);
  ~StructuredOutput();
  StructuredOutput(const StructuredOutput&) = delete;
  StructuredOutput& operator=(const StructuredOutput&) = delete;

  // The request's rule maker; null when it asks for no structure. Compiles (cached by grammar)
  // on the calling thread; throws ApiError 400 naming the field when the grammar cannot be built.
  ConstraintFactory constraint_for(const ChatOptions& options, const OutputParserOptions& output);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vt::server
