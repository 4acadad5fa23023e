// Chat deltas and messages from the output parser's pieces.
#include "server/chat_response.h"

#include <random>

namespace vt::server {
namespace {

using Json = nlohmann::ordered_json;

}  // namespace

std::string new_tool_call_id() {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kHex[generator() % 16];
  return id;
}

ChatChoiceOutput::ChatChoiceOutput(OutputParserOptions options, bool parallel_tool_calls)
    : parser_(std::move(options)), parallel_tool_calls_(parallel_tool_calls) {}

Json ChatChoiceOutput::delta_json(const OutputDelta& raw) {
  OutputDelta delta = raw;
  if (!parallel_tool_calls_)
    std::erase_if(delta.tool_calls, [](const ToolCallDelta& piece) { return piece.index > 0; });
  parsed_.add(delta);
  Json fields = Json::object();
  if (!delta.reasoning.empty()) fields["reasoning_content"] = delta.reasoning;
  if (!delta.content.empty()) fields["content"] = delta.content;
  if (delta.tool_calls.empty()) return fields;
  Json calls = Json::array();
  for (const ToolCallDelta& piece : delta.tool_calls) {
    Json call = {{"index", piece.index}};
    if (!piece.name.empty()) {  // a call's first piece: its id, type and name, as OpenAI sends them
      if (size_t(piece.index) >= ids_.size()) ids_.resize(size_t(piece.index) + 1);
      ids_[size_t(piece.index)] = new_tool_call_id();
      call["id"] = ids_[size_t(piece.index)];
      call["type"] = "function";
      call["function"] = {{"name", piece.name}, {"arguments", piece.arguments}};
    } else {
      call["function"] = {{"arguments", piece.arguments}};
    }
    calls.push_back(std::move(call));
  }
  fields["tool_calls"] = std::move(calls);
  return fields;
}

Json ChatChoiceOutput::feed(std::string_view text) { return delta_json(parser_.feed(text)); }

Json ChatChoiceOutput::finish() { return delta_json(parser_.finish()); }

Json ChatChoiceOutput::message() const {
  Json message = {{"role", "assistant"}};
  const bool calls = !parsed_.tool_calls.empty();
  // Empty content beside tool calls or reasoning is null, as OpenAI and vLLM send it; an empty
  // answer with neither (an immediate stop) stays "".
  const bool nothing_else = !calls && parsed_.reasoning.empty();
  message["content"] = parsed_.content.empty() && !nothing_else ? Json(nullptr) : Json(parsed_.content);
  message["reasoning_content"] = parsed_.reasoning.empty() ? Json(nullptr) : Json(parsed_.reasoning);
  if (!calls) return message;
  Json list = Json::array();
  for (size_t i = 0; i < parsed_.tool_calls.size(); ++i) {
    const ParsedOutput::Call& call = parsed_.tool_calls[i];
    list.push_back({{"id", i < ids_.size() ? ids_[i] : new_tool_call_id()},
                    {"type", "function"},
                    {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  }
  message["tool_calls"] = std::move(list);
  return message;
}

std::string ChatChoiceOutput::finish_reason(FinishReason engine_reason) const {
  if (!parsed_.tool_calls.empty() && engine_reason == FinishReason::kStop) return "tool_calls";
  return finish_reason_name(engine_reason);
}

}  // namespace vt::server
