#!/usr/bin/env python3
"""`vt serve` as an agent backend, with the official openai client on SmolLM2-135M-Instruct (CPU).

  test_agent.py VT_BINARY [MODEL.gguf]

Two servers: the model's own template, and the Qwen3.5 template (--chat-template; SmolLM2 speaks
ChatML too), whose prompts open <think> and teach the Qwen3-Coder XML tool format.
- tools and tool_choice accepted; tool history (assistant tool_calls, tool results) renders;
  bad tools/tool_choice/response_format get OpenAI-style 400s naming the field;
- reasoning: with thinking on, an output cut before </think> is all reasoning_content, streamed
  and whole alike; chat_template_kwargs enable_thinking false (and reasoning_effort) give content.
Exits 77 (skipped) when the model or the templates are not fetched, unless VT_REQUIRE_SMOLLM2=1.
"""
import json
import os
import re
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
FILES = {"type": "function", "function": {"name": "list_files", "description": "List files",
                                          "parameters": {"type": "object", "properties": {}}}}


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, flush=True)


def start_server(vt, model, *extra):
    process = subprocess.Popen([vt, "--threads", "2", "serve", "--model", model, "--port", "0",
                                "--served-model-name", "smollm2", "--cache-tokens", "4096", *extra],
                               stderr=subprocess.PIPE, text=True)
    port = None
    deadline = time.time() + 120
    while time.time() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        match = re.search(r"listening on http://[\d.]+:(\d+)", line)
        if match:
            port = int(match.group(1))
            break
    if port is None:
        process.kill()
        sys.exit("vt serve did not start")
    threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()
    return process, port


def stream_parts(stream):
    """Joined reasoning, content, tool calls {index: {id, name, arguments}} and the finish reason."""
    reasoning, content, calls, finish = "", "", {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        reasoning += getattr(delta, "reasoning_content", None) or (delta.model_extra or {}).get("reasoning_content") or ""
        content += delta.content or ""
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"id": None, "name": None, "arguments": ""})
            if call.id:
                check(entry["id"] is None, "a tool call's id comes once")
                entry["id"] = call.id
            if call.function and call.function.name:
                entry["name"] = call.function.name
            if call.function and call.function.arguments:
                entry["arguments"] += call.function.arguments
        finish = choice.finish_reason or finish
    return reasoning, content, calls, finish


def reasoning_of(message):
    return getattr(message, "reasoning_content", None) or (message.model_extra or {}).get("reasoning_content")


def expect_400(openai, client, param, **fields):
    try:
        client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                       **fields)
        check(False, f"accepted: {fields}")
    except openai.BadRequestError as error:
        body = error.body if isinstance(error.body, dict) else {}
        check(error.status_code == 400 and body.get("param") == param and body.get("type") == "invalid_request_error",
              f"{fields}: {error.status_code} {body}")


def test_requests(openai, client):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    plain = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=12, temperature=0,
                                           tools=[WEATHER, FILES], tool_choice="auto", parallel_tool_calls=True)
    check(plain.choices[0].finish_reason in ("stop", "length", "tool_calls"), f"auto: {plain}")
    history = messages + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C and clear"}]
    answer = client.chat.completions.create(model="smollm2", messages=history, max_tokens=8, temperature=0,
                                            tools=[WEATHER])
    check(answer.choices[0].message.role == "assistant", f"after a tool result: {answer}")
    expect_400(openai, client, "tool_choice", tool_choice="required")
    expect_400(openai, client, "tool_choice", tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}})
    expect_400(openai, client, "tools[0].function", tools=[{"type": "function"}])
    expect_400(openai, client, "response_format.type", response_format={"type": "yaml"})
    expect_400(openai, client, "reasoning_effort", reasoning_effort="extreme")
    expect_400(openai, client, "chat_template_kwargs", extra_body={"chat_template_kwargs": {"messages": []}})


def test_reasoning(client):
    messages = [{"role": "user", "content": "Say hello."}]
    # Thinking on (the template opens <think>): SmolLM2 never closes it, so all is reasoning.
    whole = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=12, temperature=0)
    message = whole.choices[0].message
    check(bool(reasoning_of(message)) and not message.content, f"thinking on: {message}")
    stream = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=12, temperature=0, stream=True)
    reasoning, content, calls, finish = stream_parts(stream)
    check(reasoning == reasoning_of(message) and content == "" and finish == whole.choices[0].finish_reason,
          f"streamed reasoning {reasoning!r} {content!r} vs {message}")
    check("<think>" not in reasoning and "</think>" not in reasoning, f"tags in reasoning {reasoning!r}")
    # Thinking off through chat_template_kwargs (and a reasoning_effort the template may read).
    off = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=12, temperature=0,
                                         reasoning_effort="low",
                                         extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    message = off.choices[0].message
    check(bool(message.content) and not reasoning_of(message), f"thinking off: {message}")
    stream = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=12, temperature=0, stream=True,
                                            extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    reasoning, content, calls, finish = stream_parts(stream)
    check(content == message.content and reasoning == "", f"streamed off {content!r} vs {message.content!r}")


def main():
    vt = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, ".cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    qwen_template = os.path.join(ROOT, ".cache/chat_templates/qwen3_5/chat_template.jinja")
    for path in (model, qwen_template):
        if not os.path.exists(path):
            if os.environ.get("VT_REQUIRE_SMOLLM2") == "1":
                sys.exit(f"{path} is missing (scripts/fetch-smollm2.sh, scripts/fetch-chat-templates.sh)")
            print(f"skipped: {path} is missing")
            sys.exit(77)
    import openai

    started = time.time()
    for extra, tests in (((), (test_requests,)), (("--chat-template", qwen_template), (test_requests, test_reasoning))):
        process, port = start_server(vt, model, *extra)
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=120)
            for test in tests:
                t0 = time.time()
                if test is test_requests:
                    test(openai, client)
                else:
                    test(client)
                print(f"  {test.__name__} {' '.join(extra)}: {time.time() - t0:.1f} s", flush=True)
            check(process.poll() is None, "the server is still running")
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
    print(f"{'FAILED' if failures else 'passed'} in {time.time() - started:.1f} s ({len(failures)} failures)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
