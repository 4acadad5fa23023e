#!/usr/bin/env python3
"""A multi-turn agent loop (user -> assistant tool call -> tool result -> answer -> user, with
reasoning, parallel calls and typed arguments) rendered by `vt chat-template` with the Qwen3.5
template is byte-identical to jinja2 set up as HF's apply_chat_template, thinking on and off and
with extra template variables (--kwargs).

  test_agent_loop_render.py VT_BINARY
Exits 77 (skipped) when the templates are not fetched (scripts/fetch-chat-templates.sh).
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import render_with_jinja2  # noqa: E402  (HF's jinja2 environment)

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string"}, "days": {"type": "integer"}},
                                          "required": ["city"]}}},
    {"type": "function", "function": {"name": "write_file", "description": "Write a file",
                                      "parameters": {"type": "object", "properties": {
                                          "path": {"type": "string"}, "content": {"type": "string"},
                                          "options": {"type": "object"}}}}},
]

MESSAGES = [
    {"role": "system", "content": "You are a careful agent."},
    {"role": "user", "content": "Weather in Paris and Tokyo, then save it to notes.md."},
    {"role": "assistant", "content": "", "reasoning_content": "Two cities: two calls.",
     "tool_calls": [
         {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}},
         {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Tokyo"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18, \"sky\": \"clear\"}"},
    {"role": "tool", "tool_call_id": "call_2", "content": "22 C, rain"},
    {"role": "assistant", "content": "Saving the summary.",
     "tool_calls": [{"id": "call_3", "type": "function", "function": {"name": "write_file", "arguments": {
         "path": "notes.md", "content": "# Weather\n- Paris: 18, clear\n- Tokyo: 22, rain\n",
         "options": {"append": False, "mode": [6, 4, 4]}}}}]},
    {"role": "tool", "tool_call_id": "call_3", "content": "ok"},
    {"role": "assistant", "content": "Paris is clear at 18 C; Tokyo has rain at 22 C. Saved to notes.md."},
    {"role": "user", "content": "Thanks! Anything else for tomorrow?"},
]

VARIANTS = [
    ("thinking_default", {}, []),
    ("thinking_off", {"enable_thinking": False}, ["--enable-thinking", "false"]),
    ("kwargs", {"enable_thinking": True, "reasoning_effort": "high", "preserve_thinking": True},
     ["--kwargs", json.dumps({"enable_thinking": True, "reasoning_effort": "high", "preserve_thinking": True})]),
]


def main():
    vt = sys.argv[1]
    folder = os.path.join(ROOT, ".cache", "chat_templates", "qwen3_5")
    path = os.path.join(folder, "chat_template.jinja")
    if not os.path.exists(path):
        print("skipped: run scripts/fetch-chat-templates.sh")
        return 77
    template = open(path, encoding="utf-8").read()
    failures = 0
    with tempfile.TemporaryDirectory() as scratch:
        messages_path = os.path.join(scratch, "messages.json")
        tools_path = os.path.join(scratch, "tools.json")
        json.dump(MESSAGES, open(messages_path, "w", encoding="utf-8"))
        json.dump(TOOLS, open(tools_path, "w", encoding="utf-8"))
        for name, extra, options in VARIANTS:
            expected = render_with_jinja2.render(template, {"messages": MESSAGES, "tools": TOOLS, "documents": None,
                                                            "add_generation_prompt": True, **extra})
            assert "output" in expected, expected
            run = subprocess.run([vt, "chat-template", "--tokenizer", folder, "--messages", messages_path, "--tools",
                                  tools_path, "--add-generation-prompt", *options], capture_output=True)
            got = run.stdout.decode("utf-8")
            if run.returncode != 0 or got != expected["output"]:
                failures += 1
                print(f"FAIL {name}: exit {run.returncode} {run.stderr.decode()}\n--- vt\n{got}\n--- jinja2\n{expected['output']}")
            elif "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>" not in got:
                failures += 1
                print(f"FAIL {name}: the tool call is not rendered")
    print(f"agent loop: {len(VARIANTS)} variants, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
