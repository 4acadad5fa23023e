// The output parser's state machine. Every decision waits until the text that decides it has
// arrived (a possible tag is held back), and every rule reads the text from a tag or from the
// start, so the joined result is the same however the output is cut.
#include "server/output_parser.h"

#include <algorithm>

#include "core/error.h"
#include "server/tool_schema.h"

namespace vt::server {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolCallOpen = "<tool_call>";
constexpr std::string_view kToolCallClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParameterOpen = "<parameter=";
constexpr std::string_view kParameterClose = "</parameter>";
// Ends a value whose `</parameter>` the model left out. `</function>` alone does not: values
// (HTML, XML, code) may hold it.
constexpr std::string_view kCallEnd = "</function>\n</tool_call>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

// True when `text` is a proper prefix of `tag` (more text may complete it).
bool could_become(std::string_view text, std::string_view tag) {
  return text.size() < tag.size() && tag.substr(0, text.size()) == text;
}

// The longest suffix of `text` that is a proper prefix of one of `tags`: text that may yet be a tag.
size_t partial_tag_length(std::string_view text, std::initializer_list<std::string_view> tags) {
  size_t longest = 0;
  for (std::string_view tag : tags)
    for (size_t length = std::min(text.size(), tag.size() - 1); length > longest; --length)
      if (text.substr(text.size() - length) == tag.substr(0, length)) {
        longest = length;
        break;
      }
  return longest;
}

struct TagMatch {
  size_t position = std::string_view::npos;
  std::string_view tag;
};

TagMatch find_first(std::string_view text, std::initializer_list<std::string_view> tags) {
  TagMatch best;
  for (std::string_view tag : tags) {
    const size_t position = text.find(tag);
    if (position < best.position) best = {position, tag};
  }
  return best;
}

// The bytes of `text` that end in whole UTF-8 characters; a cut character's first bytes are left.
size_t complete_utf8_length(std::string_view text) {
  const size_t size = text.size();
  for (size_t back = 1; back <= std::min<size_t>(3, size); ++back) {
    const unsigned char byte = static_cast<unsigned char>(text[size - back]);
    if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t expected = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
    return expected > back ? size - back : size;
  }
  return size;
}

// JSON string text without the quotes (invalid UTF-8 becomes U+FFFD).
std::string escaped(std::string_view text) {
  const std::string quoted = Json(std::string(text)).dump(-1, ' ', false, Json::error_handler_t::replace);
  return quoted.substr(1, quoted.size() - 2);
}

std::string dumped(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string trimmed(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  return std::string(text.substr(begin, text.find_last_not_of(" \t\r\n") - begin + 1));
}

void add_arguments(OutputDelta& delta, int index, std::string_view text) {
  if (text.empty()) return;
  if (delta.tool_calls.empty() || delta.tool_calls.back().index != index) delta.tool_calls.push_back({index, "", ""});
  delta.tool_calls.back().arguments += text;
}

}  // namespace

ToolCallFormat parse_tool_call_format(std::string_view name) {
  if (name == "qwen3_coder") return ToolCallFormat::kQwen3Coder;
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "none") return ToolCallFormat::kNone;
  VT_FAIL("unknown tool-call format '", name, "' (qwen3_coder, hermes, none)");
}

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kQwen3Coder: return "qwen3_coder";
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kNone: return "none";
  }
  return "none";
}

ToolCallFormat detect_tool_call_format(std::string_view chat_template) {
  if (chat_template.find(kFunctionOpen) != std::string_view::npos) return ToolCallFormat::kQwen3Coder;
  if (chat_template.find(kToolCallOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  return ToolCallFormat::kNone;
}

bool prompt_opens_reasoning(std::string_view prompt) {
  // Only the generation prompt's end counts: a `<think>` inside a message opens nothing.
  while (!prompt.empty() && is_space(prompt.back())) prompt.remove_suffix(1);
  return prompt.ends_with(kThinkOpen);
}

OutputParser::OutputParser(OutputParserOptions options)
    : options_(std::move(options)),
      format_(options_.format),
      state_(options_.reasoning ? State::kReasoningStart : State::kContentStart) {}

OutputDelta OutputParser::feed(std::string_view text) {
  incomplete_ += text;
  const size_t complete = complete_utf8_length(incomplete_);
  buffer_.append(incomplete_, 0, complete);
  incomplete_.erase(0, complete);
  OutputDelta delta;
  run(delta, /*end=*/false);
  return delta;
}

OutputDelta OutputParser::finish() {
  buffer_ += incomplete_;
  incomplete_.clear();
  OutputDelta delta;
  run(delta, /*end=*/true);
  switch (state_) {
    case State::kReasoningStart:
    case State::kReasoning:
      delta.reasoning += held_reasoning_;
      break;
    case State::kContentStart:
    case State::kContent:
      delta.content += held_content_;
      break;
    case State::kParameterValue:
      end_parameter(delta, "");
      close_call(delta);
      break;
    case State::kFunctionBody:
    case State::kParameterName:
      close_call(delta);
      break;
    case State::kToolCall:
    case State::kFunctionName:
    case State::kHermesBody:
      break;  // a call not yet named sent nothing; a Hermes body was read by run()
  }
  held_reasoning_.clear();
  held_content_.clear();
  state_ = State::kContent;
  buffer_.clear();
  return delta;
}

void OutputParser::run(OutputDelta& delta, bool end) {
  while (step(delta, end)) {
  }
}

void OutputParser::emit_text(std::string& channel, std::string& held, std::string_view text) {
  if (text.empty()) return;
  size_t body = text.size();
  while (body > 0 && is_space(text[body - 1])) --body;
  if (body == 0) {
    held += text;
    return;
  }
  channel += held;
  channel += text.substr(0, body);
  held.assign(text.substr(body));
}

bool OutputParser::step(OutputDelta& delta, bool end) {
  std::string_view text = buffer_;
  auto consume = [&](size_t count) { buffer_.erase(0, count); };
  auto skip_space = [&] {
    size_t count = 0;
    while (count < buffer_.size() && is_space(buffer_[count])) ++count;
    consume(count);
    text = buffer_;
  };
  auto after_call = [&] {
    state_ = State::kContentStart;
    any_content_ = true;  // no `<think>` opens reasoning after a call; leading whitespace is dropped
  };

  switch (state_) {
    case State::kReasoningStart: {
      skip_space();
      if (text.empty()) return false;
      if (starts_with(text, kThinkOpen)) {
        consume(kThinkOpen.size());
        return true;
      }
      if (could_become(text, kThinkOpen) && !end) return false;
      state_ = State::kReasoning;
      return true;
    }
    case State::kReasoning: {
      const size_t close = text.find(kThinkClose);
      if (close != std::string_view::npos) {
        emit_text(delta.reasoning, held_reasoning_, text.substr(0, close));
        held_reasoning_.clear();
        consume(close + kThinkClose.size());
        state_ = State::kContentStart;
        any_content_ = true;  // reasoning is over: leading whitespace of the content is dropped
        return true;
      }
      const size_t keep = end ? 0 : partial_tag_length(text, {kThinkClose});
      emit_text(delta.reasoning, held_reasoning_, text.substr(0, text.size() - keep));
      consume(text.size() - keep);
      return false;
    }
    case State::kContentStart: {
      // At the output's start whitespace is held (it is content unless a `<think>` follows);
      // after reasoning or a call it is dropped.
      size_t space = 0;
      while (space < text.size() && is_space(text[space])) ++space;
      if (!any_content_) held_content_.append(text.substr(0, space));
      consume(space);
      text = buffer_;
      if (text.empty()) return false;
      if (!any_content_ && starts_with(text, kThinkOpen)) {
        consume(kThinkOpen.size());
        held_content_.clear();
        any_content_ = true;
        state_ = State::kReasoningStart;
        return true;
      }
      if (!any_content_ && could_become(text, kThinkOpen) && !end) return false;
      any_content_ = true;
      state_ = State::kContent;
      return true;
    }
    case State::kContent: {
      if (format_ != ToolCallFormat::kNone) {
        const size_t open = text.find(kToolCallOpen);
        if (open != std::string_view::npos) {
          emit_text(delta.content, held_content_, text.substr(0, open));
          held_content_.clear();
          consume(open + kToolCallOpen.size());
          state_ = format_ == ToolCallFormat::kHermes ? State::kHermesBody : State::kToolCall;
          return true;
        }
      }
      const size_t keep = end || format_ == ToolCallFormat::kNone ? 0 : partial_tag_length(text, {kToolCallOpen});
      emit_text(delta.content, held_content_, text.substr(0, text.size() - keep));
      consume(text.size() - keep);
      return false;
    }
    case State::kToolCall: {
      skip_space();
      if (text.empty()) return false;
      if (starts_with(text, kFunctionOpen)) {
        consume(kFunctionOpen.size());
        state_ = State::kFunctionName;
        return true;
      }
      if (starts_with(text, kToolCallClose)) {
        consume(kToolCallClose.size());
        after_call();
        return true;
      }
      if (text.front() == '{') {  // a Hermes object where XML was expected: read it as Hermes
        state_ = State::kHermesBody;
        return true;
      }
      if ((could_become(text, kFunctionOpen) || could_become(text, kToolCallClose)) && !end) return false;
      // Stray text inside the call block is dropped up to the next tag.
      const TagMatch next = find_first(text, {kFunctionOpen, kToolCallClose});
      const size_t drop = next.position != std::string_view::npos
                              ? next.position
                              : text.size() - (end ? 0 : partial_tag_length(text, {kFunctionOpen, kToolCallClose}));
      consume(drop);
      return next.position != std::string_view::npos;
    }
    case State::kFunctionName:
    case State::kParameterName: {
      const size_t close = text.find('>');
      const size_t newline = text.find('\n');
      const size_t stop = std::min(close, newline);
      if (stop == std::string_view::npos) return false;  // at the end: an unnamed call or parameter is dropped
      const std::string name = trimmed(text.substr(0, stop));
      consume(stop + 1);
      if (state_ == State::kFunctionName) {
        open_call(delta, name);
        state_ = State::kFunctionBody;
      } else {
        begin_parameter(delta, name);
        state_ = State::kParameterValue;
      }
      return true;
    }
    case State::kFunctionBody: {
      skip_space();
      if (text.empty()) return false;
      if (starts_with(text, kParameterOpen)) {
        consume(kParameterOpen.size());
        state_ = State::kParameterName;
        return true;
      }
      if (starts_with(text, kFunctionClose)) {
        consume(kFunctionClose.size());
        close_call(delta);
        state_ = State::kToolCall;
        return true;
      }
      if (starts_with(text, kToolCallClose)) {
        consume(kToolCallClose.size());
        close_call(delta);
        after_call();
        return true;
      }
      const auto tags = {kParameterOpen, kFunctionClose, kToolCallClose};
      if (std::any_of(tags.begin(), tags.end(), [&](std::string_view tag) { return could_become(text, tag); }) && !end)
        return false;
      const TagMatch next = find_first(text, tags);
      const size_t drop = next.position != std::string_view::npos
                              ? next.position
                              : text.size() - (end ? 0 : partial_tag_length(text, tags));
      consume(drop);
      return next.position != std::string_view::npos;
    }
    case State::kParameterValue: {
      if (!value_started_) {
        if (text.empty()) return false;
        if (text.front() == '\n') consume(1);  // the newline after the tag is layout
        value_started_ = true;
        text = buffer_;
      }
      const TagMatch close = find_first(text, {kParameterClose, kCallEnd});
      if (close.position != std::string_view::npos) {
        end_parameter(delta, text.substr(0, close.position));
        consume(close.position + close.tag.size());
        if (close.tag == kParameterClose) {
          state_ = State::kFunctionBody;
        } else {
          close_call(delta);
          after_call();
        }
        return true;
      }
      if (end) {
        end_parameter(delta, text);
        consume(text.size());
        close_call(delta);
        after_call();
        return false;
      }
      if (!parameter_streams_) return false;  // a typed value is converted whole
      // Send what cannot be part of the closing tag, nor the newline before it.
      size_t ready = text.size() - partial_tag_length(text, {kParameterClose, kCallEnd});
      if (ready > 0 && text[ready - 1] == '\n') --ready;
      add_arguments(delta, calls_ - 1, escaped(text.substr(0, ready)));
      consume(ready);
      return false;
    }
    case State::kHermesBody: {
      const size_t close = text.find(kToolCallClose);
      if (close == std::string_view::npos && !end) return false;
      finish_hermes(delta, text.substr(0, close));
      consume(close == std::string_view::npos ? text.size() : close + kToolCallClose.size());
      after_call();
      return close != std::string_view::npos;
    }
  }
  return false;
}

void OutputParser::open_call(OutputDelta& delta, const std::string& name) {
  call_name_ = name;
  call_parameters_ = 0;
  call_open_ = true;
  delta.tool_calls.push_back({calls_++, name, ""});
}

void OutputParser::begin_parameter(OutputDelta& delta, const std::string& name) {
  parameter_name_ = name;
  value_started_ = false;
  const Json schema = parameter_schema(options_.tools, call_name_, name);
  parameter_streams_ = is_text_parameter(schema);
  if (parameter_streams_) {
    add_arguments(delta, calls_ - 1, (call_parameters_ == 0 ? "{" : ",") + dumped(name) + ":\"");
    ++call_parameters_;
  }
}

void OutputParser::end_parameter(OutputDelta& delta, std::string_view raw_tail) {
  // The newline before the closing tag is layout; so is a last newline of a cut value.
  std::string_view tail = raw_tail;
  if (!tail.empty() && tail.back() == '\n') tail.remove_suffix(1);
  if (parameter_streams_) {
    add_arguments(delta, calls_ - 1, escaped(tail) + "\"");
    return;
  }
  const Json schema = parameter_schema(options_.tools, call_name_, parameter_name_);
  add_arguments(delta, calls_ - 1,
                (call_parameters_ == 0 ? "{" : ",") + dumped(parameter_name_) + ":" +
                    dumped(typed_parameter_value(schema, tail)));
  ++call_parameters_;
}

void OutputParser::close_call(OutputDelta& delta) {
  if (!call_open_) return;
  add_arguments(delta, calls_ - 1, call_parameters_ == 0 ? "{}" : "}");
  call_open_ = false;
}

void OutputParser::finish_hermes(OutputDelta& delta, std::string_view body) {
  // A body that is not an object with a name is dropped: nothing of it was sent.
  const Json call = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) return;
  std::string arguments = "{}";
  for (const char* key : {"arguments", "parameters"}) {
    if (!call.contains(key)) continue;
    const Json& value = call[key];
    if (value.is_string()) {
      const Json parsed = Json::parse(value.get<std::string>(), nullptr, /*allow_exceptions=*/false);
      arguments = parsed.is_discarded() ? value.get<std::string>() : dumped(parsed);
    } else {
      arguments = dumped(value);
    }
    break;
  }
  delta.tool_calls.push_back({calls_++, call["name"].get<std::string>(), arguments});
}

void ParsedOutput::add(const OutputDelta& delta) {
  reasoning += delta.reasoning;
  content += delta.content;
  for (const ToolCallDelta& piece : delta.tool_calls) {
    if (size_t(piece.index) >= tool_calls.size()) tool_calls.resize(size_t(piece.index) + 1);
    Call& call = tool_calls[size_t(piece.index)];
    if (!piece.name.empty()) call.name = piece.name;
    call.arguments += piece.arguments;
  }
}

nlohmann::ordered_json ParsedOutput::to_json() const {
  using Ordered = nlohmann::ordered_json;
  auto text = [](const std::string& value) { return value.empty() ? Ordered(nullptr) : Ordered(value); };
  Ordered calls = Ordered::array();
  for (const Call& call : tool_calls)
    calls.push_back({{"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  return {{"reasoning_content", text(reasoning)}, {"content", text(content)}, {"tool_calls", calls}};
}

ParsedOutput parse_output(const OutputParserOptions& options, std::string_view output, size_t chunk_bytes) {
  OutputParser parser(options);
  ParsedOutput parsed;
  const size_t step = chunk_bytes == 0 ? std::max<size_t>(output.size(), 1) : chunk_bytes;
  for (size_t offset = 0; offset < output.size(); offset += step) parsed.add(parser.feed(output.substr(offset, step)));
  parsed.add(parser.finish());
  return parsed;
}

}  // namespace vt::server
