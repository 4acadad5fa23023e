#!/usr/bin/env python3
"""`vt serve` as an agent backend, with the official openai client on SmolLM2-135M-Instruct (CPU).

  test_agent.py VT_BINARY [MODEL.gguf]

Two servers: the model's own template, and the Qwen3.5 template (--chat-template; SmolLM2 speaks
ChatML too), whose prompts open <think> and teach the Qwen3-Coder XML tool format.
- tools and tool_choice accepted; tool history (assistant tool_calls, tool results) renders;
  bad tools/tool_choice/response_format get OpenAI-style 400s naming the field;
- reasoning: with thinking on, an output cut before </think> is all reasoning_content, streamed
  and whole alike; chat_template_kwargs enable_thinking false (and reasoning_effort) give content;
- structured output (the first server speculates: drafts are checked against the grammar): json_schema
  answers (nested objects, enums, bounded arrays, numbers) parse and validate, streamed and not,
  8 at once with different schemas; json_object is always an object; tool_choice named and required
  give calls whose arguments validate against the tool's schema (Hermes JSON with the model's
  template, Qwen3-Coder XML with Qwen3.5's), streamed as delta.tool_calls, finish_reason
  "tool_calls"; a schema xgrammar cannot compile is a 400.
Exits 77 (skipped) when the model or the templates are not fetched, unless VT_REQUIRE_SMOLLM2=1.
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import time

import vt_server

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
    return vt_server.start_server(vt, model, "--served-model-name", "smollm2", "--cache-tokens", "4096", *extra)


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
    check(bool(reasoning_of(message)) and message.content is None, f"thinking on: {message}")
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
    # reasoning_effort "none" turns thinking off as vLLM does (Qwen's templates read enable_thinking).
    none = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=12, temperature=0,
                                          reasoning_effort="none").choices[0].message
    check(none.content == message.content and not reasoning_of(none), f"reasoning_effort none: {none}")


SCHEMAS = [
    {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 20}, "kind": {"enum": ["cat", "dog", "bird"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1, "maxItems": 3},
        "age": {"type": "integer", "minimum": 0, "maximum": 30}, "weight": {"type": "number"},
        "owner": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                                   "city": {"type": "string", "maxLength": 20}},
                  "required": ["name", "city"], "additionalProperties": False}},
     "required": ["name", "kind", "tags", "age", "weight", "owner"], "additionalProperties": False},
    {"type": "object", "properties": {"answer": {"type": "integer"}, "confident": {"type": "boolean"}},
     "required": ["answer", "confident"], "additionalProperties": False},
    {"type": "object", "properties": {"points": {"type": "array", "minItems": 2, "maxItems": 2, "items": {
        "type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"],
        "additionalProperties": False}}}, "required": ["points"], "additionalProperties": False},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                      "shades": {"type": "array", "items": {"enum": ["light", "dark"]}, "maxItems": 2}},
     "required": ["color", "shades"], "additionalProperties": False},
]
PROMPTS = ["Describe a pet.", "What is 6 times 7?", "Give two points on a line.", "Pick a color."]


def json_response(client, schema, prompt, stream, **extra):
    fields = dict(model="smollm2", messages=[{"role": "user", "content": prompt + " Answer in JSON."}], max_tokens=160,
                  temperature=0, response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema,
                                                                                         "strict": True}}, **extra)
    if not stream:
        response = client.chat.completions.create(**fields)
        return response.choices[0].message.content, response.choices[0].finish_reason
    reasoning, content, calls, finish = stream_parts(client.chat.completions.create(stream=True, **fields))
    return content, finish


def validate(jsonschema, text, schema, what):
    try:
        value = json.loads(text)
        jsonschema.validate(value, schema)
        return value
    except Exception as error:  # noqa: BLE001 (any failure is the test's)
        check(False, f"{what}: {text!r} does not validate: {error}")
        return None


def test_structured(openai, client):
    import jsonschema

    for index, (schema, prompt) in enumerate(zip(SCHEMAS, PROMPTS)):
        for stream in (False, True):
            text, finish = json_response(client, schema, prompt, stream,
                                         extra_body={"num_speculative_tokens": 0 if index % 2 else 3})
            check(finish == "stop", f"json_schema {index} stream={stream}: finish {finish} ({text!r})")
            validate(jsonschema, text, schema, f"json_schema {index} stream={stream}")
    # Batch: 8 requests at once, each its own schema, speculating or not.
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(json_response, client, SCHEMAS[i % 4], PROMPTS[i % 4], i % 3 == 0,
                               extra_body={"num_speculative_tokens": i % 2 * 3}) for i in range(8)]
        for i, future in enumerate(futures):
            text, finish = future.result()
            validate(jsonschema, text, SCHEMAS[i % 4], f"batched json_schema {i}")
    for prompt in ("Give me JSON.", "List three fruits."):
        for stream in (False, True):
            fields = dict(model="smollm2", messages=[{"role": "user", "content": prompt}], max_tokens=80, temperature=0,
                          response_format={"type": "json_object"})
            if stream:
                _, text, _, finish = stream_parts(client.chat.completions.create(stream=True, **fields))
            else:
                response = client.chat.completions.create(**fields)
                text, finish = response.choices[0].message.content, response.choices[0].finish_reason
            if finish == "stop":
                value = validate(jsonschema, text, {"type": "object"}, f"json_object {prompt!r}")
                check(isinstance(value, dict), f"json_object {prompt!r}: {text!r}")
            else:  # cut by max_tokens: still the start of an object
                check(text.startswith("{"), f"json_object {prompt!r} cut: {text!r}")
    expect_400(openai, client, "response_format.json_schema.schema", response_format={
        "type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "integer", "minimum": 5, "maximum": 1}}})


FORCED_CASES = [({"type": "function", "function": {"name": "get_weather"}}, True),
                ({"type": "function", "function": {"name": "list_files"}}, True), ("required", False), ("required", True)]


def test_forced_tools(client, cases=FORCED_CASES, **extra):
    import jsonschema

    tools = [WEATHER, FILES]
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in tools}
    messages = [{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}]
    for choice, parallel in cases:
        fields = dict(model="smollm2", messages=messages, max_tokens=80, temperature=0, tools=tools,
                      tool_choice=choice, parallel_tool_calls=parallel, **extra)
        whole = client.chat.completions.create(**fields)
        message = whole.choices[0].message
        calls = message.tool_calls or []
        check(len(calls) >= 1, f"{choice}: no tool call: {message}")
        check(not message.content or "<tool_call>" not in message.content, f"{choice}: a tag in content {message.content!r}")
        for call in calls:
            check(call.id.startswith("call_") and call.type == "function", f"{choice}: call {call}")
            if isinstance(choice, dict):
                check(call.function.name == choice["function"]["name"], f"{choice}: called {call.function.name}")
            if call.function.name in schemas:
                validate(jsonschema, call.function.arguments, schemas[call.function.name], f"{choice} arguments")
            else:
                check(False, f"{choice}: unknown function {call.function.name}")
        if whole.choices[0].finish_reason == "stop":
            check(False, f"{choice}: finish_reason stop with tool calls")
        if not parallel:
            check(len(calls) == 1 and whole.choices[0].finish_reason == "tool_calls",
                  f"{choice} one call: {len(calls)} {whole.choices[0].finish_reason}")
        reasoning, content, streamed, finish = stream_parts(client.chat.completions.create(stream=True, **fields))
        check(finish == whole.choices[0].finish_reason, f"{choice} streamed finish {finish}")
        check([(c["name"], c["arguments"]) for _, c in sorted(streamed.items())] ==
              [(c.function.name, c.function.arguments) for c in calls], f"{choice} streamed calls {streamed} vs {calls}")
        check(all(c["id"] and c["id"].startswith("call_") for c in streamed.values()), f"{choice}: streamed ids {streamed}")
        check("<" not in content, f"{choice}: streamed content {content!r}")


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
    thinking_off = {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
    servers = [(("--speculative", "ngram", "--num-draft", "3"),
                (lambda c: test_requests(openai, c), lambda c: test_structured(openai, c), test_forced_tools)),
               (("--chat-template", qwen_template),
                (lambda c: test_requests(openai, c), test_reasoning,
                 lambda c: test_forced_tools(c, FORCED_CASES[0::2], **thinking_off)))]
    for extra, tests in servers:
        process, port = start_server(vt, model, *extra)
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=120)
            for number, test in enumerate(tests):
                t0 = time.time()
                test(client)
                print(f"  test {number} {' '.join(extra)}: {time.time() - t0:.1f} s", flush=True)
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
