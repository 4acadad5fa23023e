// libFuzzer target for vt's Jinja engine: any input, parsed as a template and rendered with a small
// chat, must either render or throw vt::jinja::TemplateError. A crash, hang or other exception is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "jinja/template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json variables = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "héllo 你好"},
                 {"role": "assistant", "content": "<think>\nr\n</think>\n\nok",
                  "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]},
                 {"role": "tool", "content": "{\"x\": 1}"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<s>"})");
  const std::string source(reinterpret_cast<const char*>(data), size);
  try {
    vt::jinja::Template compiled(source);
    compiled.render(variables);
  } catch (const vt::jinja::TemplateError&) {
  }
  return 0;
}
