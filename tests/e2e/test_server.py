#!/usr/bin/env python3
"""`vt serve` end to end with the official openai client on SmolLM2-135M-Instruct (CPU).

  test_server.py VT_BINARY [MODEL.gguf]

Completions and chat completions, streamed and not, with usage; 16 concurrent greedy streams equal
to each request alone; a client that hangs up mid-stream frees its cache; bad requests get 4xx
with an error object and the server stays up; the API key guards all but /health.
Exits 77 (skipped) when the model is not fetched, unless VT_REQUIRE_SMOLLM2=1.
"""
import concurrent.futures
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
API_KEY = "e2e-secret-key"
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, flush=True)


def start_server(vt, model):
    process = subprocess.Popen([vt, "--threads", "2", "serve", "--model", model, "--port", "0", "--api-key", API_KEY,
                                "--served-model-name", "smollm2", "--cache-tokens", "32768"],
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
    threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()  # drain
    return process, port


def raw(port, method, path, body=None, headers=None, key=API_KEY):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    all_headers = {"Content-Type": "application/json"}
    if key:
        all_headers["Authorization"] = "Bearer " + key
    all_headers.update(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    connection.request(method, path, body=body, headers=all_headers)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, data


def metrics(port):
    status, data = raw(port, "GET", "/metrics")
    values = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.split()
            values[name] = float(value)
    return values


def test_basics(client, port):
    check(raw(port, "GET", "/health", key=None)[0] == 200, "/health without a key")
    check(raw(port, "GET", "/v1/models", key=None)[0] == 401, "/v1/models without a key is 401")
    check(raw(port, "GET", "/v1/models", key="wrong-key-of-other-len")[0] == 401, "wrong key is 401")
    models = client.models.list()
    check([m.id for m in models.data] == ["smollm2"], f"models: {models}")


def test_completions(client):
    prompt = "The capital of France is"
    plain = client.completions.create(model="smollm2", prompt=prompt, max_tokens=8, temperature=0)
    choice = plain.choices[0]
    check(plain.usage.completion_tokens == 8 or choice.finish_reason == "stop", f"completion usage {plain.usage}")
    check(plain.usage.prompt_tokens > 0, "prompt_tokens > 0")
    check(plain.usage.total_tokens == plain.usage.prompt_tokens + plain.usage.completion_tokens, "total_tokens")
    check("Paris" in choice.text, f"completion text {choice.text!r}")
    stream = client.completions.create(model="smollm2", prompt=prompt, max_tokens=8, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    text, usage, finish = "", None, None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].text
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    check(text == choice.text, f"streamed {text!r} != {choice.text!r}")
    check(usage is not None and usage.model_dump() == plain.usage.model_dump(), f"stream usage {usage} vs {plain.usage}")
    check(finish == choice.finish_reason, f"finish {finish} vs {choice.finish_reason}")
    stopped = client.completions.create(model="smollm2", prompt=prompt, max_tokens=8, temperature=0, stop=["aris"])
    check(stopped.choices[0].text == choice.text.split("aris")[0] and stopped.choices[0].finish_reason == "stop",
          f"stop string: {stopped.choices[0].text!r}")


def test_chat(client):
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    plain = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=10, temperature=0)
    answer = plain.choices[0].message.content
    check(plain.choices[0].message.role == "assistant", "chat role")
    check("Paris" in answer, f"chat answer {answer!r}")
    check(plain.usage.total_tokens == plain.usage.prompt_tokens + plain.usage.completion_tokens, "chat total_tokens")
    stream = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=10, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    text, usage = "", None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage:
            usage = chunk.usage
    check(text == answer, f"chat streamed {text!r} != {answer!r}")
    check(usage is not None and usage.model_dump() == plain.usage.model_dump(), f"chat stream usage {usage}")


def test_concurrent_streams(client, count=16):
    prompts = [f"Write a short sentence about the number {i}." for i in range(count)]

    def chat(prompt, stream):
        kwargs = dict(model="smollm2", messages=[{"role": "user", "content": prompt}], max_tokens=12, temperature=0)
        if not stream:
            return client.chat.completions.create(**kwargs).choices[0].message.content
        text = ""
        for chunk in client.chat.completions.create(stream=True, **kwargs):
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        return text

    alone = [chat(prompt, False) for prompt in prompts]
    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        together = list(pool.map(lambda p: chat(p, True), prompts))
    print(f"{count} concurrent streams in {time.time() - start:.1f} s", flush=True)
    for i, (a, b) in enumerate(zip(alone, together)):
        check(a == b, f"request {i}: alone {a!r} != concurrent {b!r}")


def test_disconnect(port):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = json.dumps({"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 4000, "stream": True,
                       "temperature": 0, "stop": []})
    connection.request("POST", "/v1/completions", body=body,
                       headers={"Content-Type": "application/json", "Authorization": "Bearer " + API_KEY})
    response = connection.getresponse()
    check(response.status == 200, f"stream status {response.status}")
    for _ in range(3):
        response.fp.readline()
    running = metrics(port)["vt_requests_running"]
    check(running == 1, f"running while streaming: {running}")
    connection.sock.close()
    connection.close()
    deadline = time.time() + 15
    while time.time() < deadline:
        values = metrics(port)
        if values["vt_requests_running"] == 0 and values["vt_kv_blocks_used"] == 0:
            break
        time.sleep(0.2)
    values = metrics(port)
    check(values["vt_requests_running"] == 0 and values["vt_requests_waiting"] == 0, f"after hang-up: {values}")
    check(values["vt_kv_blocks_used"] == 0 and values["vt_state_slots_used"] == 0, f"cache after hang-up: {values}")
    check(values["vt_requests_cancelled_total"] >= 1, "the hang-up counted as a cancellation")


BAD_REQUESTS = [
    ("/v1/completions", "{not json"),
    ("/v1/completions", "[1, 2, 3]"),
    ("/v1/completions", '"a string"'),
    ("/v1/completions", b'{"prompt": "caf\xc3\x28"}'),
    ("/v1/completions", {}),
    ("/v1/completions", {"prompt": ""}),
    ("/v1/completions", {"prompt": []}),
    ("/v1/completions", {"prompt": ["a", "b"]}),
    ("/v1/completions", {"prompt": [1, 10**9]}),
    ("/v1/completions", {"prompt": "hi", "model": "gpt-4"}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 0}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 10**7}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": "8"}),
    ("/v1/completions", {"prompt": "hi", "n": 3}),
    ("/v1/completions", {"prompt": "hi", "temperature": -1}),
    ("/v1/completions", '{"prompt": "hi", "temperature": NaN}'),
    ("/v1/completions", {"prompt": "hi", "top_p": 0}),
    ("/v1/completions", {"prompt": "hi", "top_p": 1.01}),
    ("/v1/completions", {"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}),
    ("/v1/completions", {"prompt": "hi", "logprobs": 5}),
    ("/v1/completions", {"prompt": "hi", "logit_bias": {"1": 5}}),
    ("/v1/completions", {"prompt": "hi", "stream_options": {"include_usage": True}}),
    ("/v1/chat/completions", {}),
    ("/v1/chat/completions", {"messages": []}),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}),
    ("/v1/chat/completions", {"messages": "hello"}),
    ("/v1/chat/completions", "[" * 5000 + "]" * 5000),
    ("/v1/nowhere", {"prompt": "hi"}),
]


def test_bad_requests(port):
    for path, body in BAD_REQUESTS:
        status, data = raw(port, "POST", path, body)
        error = None
        try:
            error = json.loads(data)["error"]
        except (ValueError, KeyError, TypeError):
            pass
        check(400 <= status < 500 and error is not None and error.get("message"),
              f"{path} {str(body)[:60]!r}: status {status}, body {data[:200]!r}")
    status, _ = raw(port, "POST", "/v1/completions", "x" * (2 << 20))
    check(status == 413, f"oversize body: status {status}")
    check(len(BAD_REQUESTS) + 1 >= 20, "at least 20 bad requests")
    check(raw(port, "GET", "/health")[0] == 200, "the server is up after bad requests")


def main():
    vt = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, ".cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        if os.environ.get("VT_REQUIRE_SMOLLM2") == "1":
            sys.exit(f"{model} is missing (scripts/fetch-smollm2.sh)")
        print(f"skipped: {model} is missing (scripts/fetch-smollm2.sh)")
        sys.exit(77)
    import openai

    started = time.time()
    process, port = start_server(vt, model)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, max_retries=0, timeout=120)
        for test in (lambda: test_basics(client, port), lambda: test_completions(client), lambda: test_chat(client),
                     lambda: test_concurrent_streams(client), lambda: test_disconnect(port),
                     lambda: test_bad_requests(port), lambda: test_completions(client)):
            test()
        check(process.poll() is None, "the server is still running")
        values = metrics(port)
        check(values["vt_requests_running"] == 0 and values["vt_kv_blocks_used"] == 0, f"final metrics {values}")
    finally:
        process.terminate()
        try:
            code = process.wait(timeout=20)
            check(code == 0, f"vt serve exited {code} on SIGTERM")
        except subprocess.TimeoutExpired:
            process.kill()
            check(False, "vt serve did not stop on SIGTERM")
    print(f"{'FAILED' if failures else 'passed'} in {time.time() - started:.1f} s ({len(failures)} failures)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
