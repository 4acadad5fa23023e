#!/usr/bin/env python3
"""`vt serve` end to end with the official openai client on SmolLM2-135M-Instruct (CPU).

  test_server.py VT_BINARY [MODEL.gguf]

Completions and chat completions, streamed and not, with usage (prompt_tokens_details.cached_tokens
among it); /metrics in the Prometheus text format with vLLM's names beside vt's; logprobs, n and
logit_bias; 16
greedy prompts alone equal to `vt generate`, and 64 concurrent streams of them equal to each alone,
on a KV cache small enough to preempt, while
a request larger than the cache gets a 400; a client that hangs up mid-stream frees its cache; 40+
bad requests get 4xx with an error object and the server stays up; the API key guards all but
/health. A second server: CORS allow-list, --max-concurrent-requests (429), and SIGTERM draining
(the stream in flight completes, new requests get 503, exit 0). A third: --speculative ngram, whose
greedy outputs, logprobs and stop strings equal those of requests that opt out
(num_speculative_tokens 0), alone and 16 at once; seeded sampling repeats; the speculative metrics
add up; bad num_speculative_tokens values get 400.
Exits 77 (skipped) when the model is not fetched, unless VT_REQUIRE_SMOLLM2=1.
"""
import concurrent.futures
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time

import vt_server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
API_KEY = "e2e-secret-key"
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, flush=True)


CACHE_TOKENS = 512  # 32 blocks of 16: 64 concurrent requests do not fit at once (preemption)


def start_server(vt, model, *extra):
    return vt_server.start_server(vt, model, "--api-key", API_KEY, "--served-model-name", "smollm2",
                                  "--cache-tokens", str(CACHE_TOKENS), *extra)


def raw(port, method, path, body=None, headers=None, key=API_KEY, timeout=60):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
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


def request_blocks(values):
    """KV blocks requests hold: those only the prefix cache holds (saved prompts) are free for them."""
    return values["vt_kv_blocks_used"] - values.get("vt_prefix_cache_blocks", 0)


def check_usage(usage, where):
    """OpenAI's usage, with the prompt tokens taken from the prefix cache (none to all of them)."""
    details = usage.prompt_tokens_details if usage else None
    cached = details.cached_tokens if details else None
    check(isinstance(cached, int) and 0 <= cached <= usage.prompt_tokens,
          f"{where}: usage.prompt_tokens_details.cached_tokens {cached} of {usage and usage.prompt_tokens}")


def same_counts(usage, other):
    """Equal token counts; cached_tokens may differ (the second of two equal prompts finds the first's)."""
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    return usage is not None and all(getattr(usage, key) == getattr(other, key) for key in keys)


# A sample line of the Prometheus text format: a name ("vllm:" names included), labels, a value.
SAMPLE_LINE = re.compile(r'[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\["\\n])*"'
                         r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\["\\n])*")*\})? \S+')
VLLM_LABELS = '{engine="0",model_name="smollm2"}'


def test_metrics_format(port):
    """Every /metrics line parses; vt's prefix-cache metrics and the vllm: ones routers read are there,
    the latter labelled as vLLM labels them, and agree with vt's own."""
    status, data = raw(port, "GET", "/metrics")
    check(status == 200, f"/metrics: {status}")
    typed = set()
    for line in data.decode().splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            name = line.split()[2]
            check(name not in typed, f"/metrics: a second TYPE for {name}")
            typed.add(name)
            continue
        check(SAMPLE_LINE.fullmatch(line) is not None, f"/metrics: not a Prometheus line: {line!r}")
    values = labeled_metrics(port)
    for name in ("vt_prefix_cache_queries_tokens_total", "vt_prefix_cache_hits_tokens_total", "vt_prefix_cache_snapshots",
                 "vt_prefix_cache_snapshot_bytes", "vt_prefix_cache_blocks", "vt_prefix_cache_bytes",
                 "vt_prefix_cache_evictions_total"):
        check(name in values, f"/metrics: {name} missing")
    for name, ours in (("vllm:num_requests_running", "vt_requests_running"),
                       ("vllm:num_requests_waiting", "vt_requests_waiting"),
                       ("vllm:kv_cache_usage_perc", "vt_kv_cache_usage_ratio"),
                       ("vllm:prefix_cache_queries_total", "vt_prefix_cache_queries_tokens_total"),
                       ("vllm:prefix_cache_hits_total", "vt_prefix_cache_hits_tokens_total")):
        check(values.get(name + VLLM_LABELS) == values.get(ours), f"/metrics: {name}{VLLM_LABELS} "
              f"{values.get(name + VLLM_LABELS)} != {ours} {values.get(ours)}")
    check(0 <= values.get("vllm:kv_cache_usage_perc" + VLLM_LABELS, -1) <= 1, "vllm:kv_cache_usage_perc is a fraction")
    check(values.get("vllm:prefix_cache_hits_total" + VLLM_LABELS, 1) <=
          values.get("vllm:prefix_cache_queries_total" + VLLM_LABELS, 0), "prefix cache hits <= queries")


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
    check(same_counts(usage, plain.usage), f"stream usage {usage} vs {plain.usage}")
    check_usage(plain.usage, "completion")
    check_usage(usage, "streamed completion")
    check(finish == choice.finish_reason, f"finish {finish} vs {choice.finish_reason}")
    check_continuous_usage(client.completions.create(
        model="smollm2", prompt=prompt, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True}), plain.usage, "completion")
    for chunk in client.completions.create(model="smollm2", prompt=prompt, max_tokens=3, temperature=0, stream=True,
                                           stream_options={"continuous_usage_stats": True}):
        check(chunk.usage is None, f"continuous_usage_stats without include_usage: {chunk}")
    test_prompt_batch(client)
    stopped = client.completions.create(model="smollm2", prompt=prompt, max_tokens=8, temperature=0, stop=["aris"])
    check(stopped.choices[0].text == choice.text.split("aris")[0] and stopped.choices[0].finish_reason == "stop",
          f"stop string: {stopped.choices[0].text!r}")


def test_prompt_batch(client):
    """A list of prompts is a batch (vLLM, OpenAI; LangChain's OpenAI LLM sends its batches so): n
    choices per prompt, prompt i's at indices i*n.., each as the prompt alone; usage adds them up."""
    for prompts in (["The capital of France is", "Once upon a time"], [[504, 3575, 282], [1000, 2000, 3000, 4000]]):
        alone = [client.completions.create(model="smollm2", prompt=p, max_tokens=8, temperature=0) for p in prompts]
        texts = [a.choices[0].text for a in alone]
        prompt_tokens = sum(a.usage.prompt_tokens for a in alone)
        batch = client.completions.create(model="smollm2", prompt=prompts, max_tokens=8, temperature=0, n=2)
        got = [c.text for c in sorted(batch.choices, key=lambda c: c.index)]
        check(sorted(c.index for c in batch.choices) == [0, 1, 2, 3] and got == [texts[0], texts[0], texts[1], texts[1]],
              f"batch {prompts}: {got} vs {texts}")
        check(batch.usage.prompt_tokens == prompt_tokens and
              batch.usage.completion_tokens == 2 * sum(a.usage.completion_tokens for a in alone) and
              batch.usage.total_tokens == batch.usage.prompt_tokens + batch.usage.completion_tokens,
              f"batch usage {batch.usage}")
        check_usage(batch.usage, "batch")
        pieces, finishes, last = {}, {}, None
        for chunk in client.completions.create(model="smollm2", prompt=prompts, max_tokens=8, temperature=0,
                                               stream=True, stream_options={"include_usage": True}):
            for c in chunk.choices:
                pieces[c.index] = pieces.get(c.index, "") + c.text
                finishes[c.index] = c.finish_reason or finishes.get(c.index)
            last = chunk.usage or last
        check(pieces == {0: texts[0], 1: texts[1]} and all(finishes.values()) and
              last is not None and last.prompt_tokens == prompt_tokens, f"streamed batch {pieces} {finishes} {last}")


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
    check(same_counts(usage, plain.usage), f"chat stream usage {usage} vs {plain.usage}")
    check_usage(plain.usage, "chat")
    check_usage(usage, "streamed chat")
    check_continuous_usage(client.chat.completions.create(
        model="smollm2", messages=messages, max_tokens=10, temperature=0, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True}), plain.usage, "chat")


def check_continuous_usage(stream, whole, what):
    """vLLM's stream_options.continuous_usage_stats: every chunk's usage counts the prompt and the
    tokens so far (the role chunk none), the last its total; without include_usage, no usage."""
    counts, last = [], None
    for chunk in stream:
        usage = chunk.usage
        check(usage is not None and usage.prompt_tokens == whole.prompt_tokens and
              usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, f"{what} continuous usage {chunk}")
        if chunk.choices and usage:
            counts.append(usage.completion_tokens)
        last = usage
    check(len(counts) > 2 and counts == sorted(counts) and counts[-1] == whole.completion_tokens,
          f"{what}: continuous completion_tokens {counts}, whole {whole}")
    check(same_counts(last, whole), f"{what}: the usage chunk {last} vs {whole}")


def generate_text(vt, model, prompt, max_tokens):
    """`vt generate`'s greedy text for a completion prompt: the reference the server must match."""
    result = subprocess.run([vt, "--threads", "2", "generate", "--model", model, "--prompt", prompt,
                             "--max-new-tokens", str(max_tokens), "--temperature", "0", "--json"],
                            capture_output=True, text=True, timeout=120)
    check(result.returncode == 0, f"vt generate failed: {result.stderr[-500:]}")
    return json.loads(result.stdout)["text"]


def test_concurrent_streams(client, port, vt, model, count=64, distinct=16):
    """Each of 16 prompts alone gives `vt generate`'s greedy text, and 64 streams at once (each
    prompt 4 times) give the same, on a cache that holds only some of them (so requests are
    preempted and recomputed); meanwhile a request larger than the cache is refused with a 400
    naming the context, and the others proceed."""
    prompts = [f"Here is one short sentence about the number {i}, and here is" for i in range(distinct)]

    def chat(prompt, stream):  # completions: a short prompt keeps the CPU time in CI small
        kwargs = dict(model="smollm2", prompt=prompt, max_tokens=6, temperature=0)
        if not stream:
            return client.completions.create(**kwargs).choices[0].text
        text = ""
        for chunk in client.completions.create(stream=True, **kwargs):
            if chunk.choices:
                text += chunk.choices[0].text
        return text

    alone = [chat(prompt, False) for prompt in prompts]
    for prompt, text in zip(prompts, alone):
        expected = generate_text(vt, model, prompt, 6)
        check(text == expected, f"{prompt!r}: the server alone {text!r} != vt generate {expected!r}")
    before = metrics(port)
    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(chat, prompts[i % distinct], True) for i in range(count)]
        time.sleep(1.0)
        status, data = raw(port, "POST", "/v1/completions",
                           {"model": "smollm2", "prompt": "word " * (CACHE_TOKENS + 100), "max_tokens": 4})
        message = json.loads(data).get("error", {}).get("message", "") if data.startswith(b"{") else ""
        check(status == 400 and "context" in message, f"a request larger than the cache: {status} {data[:200]!r}")
        together = [future.result() for future in futures]
    after = metrics(port)
    print(f"{count} concurrent streams in {time.time() - start:.1f} s, "
          f"{after['vt_preemptions_total'] - before['vt_preemptions_total']:.0f} preemptions", flush=True)
    for i, text in enumerate(together):
        check(text == alone[i % distinct], f"request {i}: alone {alone[i % distinct]!r} != concurrent {text!r}")
    check(after["vt_time_to_first_token_seconds_count"] > before["vt_time_to_first_token_seconds_count"], "TTFT observed")
    check(after["vt_inter_token_latency_seconds_count"] >= before["vt_inter_token_latency_seconds_count"] + count * 4,
          "inter-token latencies observed")
    steps = after["vt_engine_steps_total"] - before["vt_engine_steps_total"]
    check(steps > 0 and after["vt_engine_step_duration_seconds_count"] - before["vt_engine_step_duration_seconds_count"] == steps,
          "every engine step is in the step-time histogram")


def test_sampling_features(client):
    """logprobs (completions and chat, streamed and not), n choices, seed, logit_bias."""
    prompt = "The capital of France is"
    plain = client.completions.create(model="smollm2", prompt=prompt, max_tokens=6, temperature=0, logprobs=3)
    choice = plain.choices[0]
    lp = choice.logprobs
    check(lp is not None and len(lp.tokens) == plain.usage.completion_tokens == len(lp.token_logprobs)
          == len(lp.top_logprobs) == len(lp.text_offset), f"completion logprobs shape: {lp}")
    if lp is not None and lp.tokens:
        check("".join(lp.tokens) == choice.text, f"tokens {lp.tokens} join to {choice.text!r}")
        check(all(v <= 0 for v in lp.token_logprobs), "logprobs <= 0")
        check(all(3 <= len(top) <= 4 for top in lp.top_logprobs), f"top_logprobs sizes {lp.top_logprobs}")
        # Greedy: the chosen token is the most likely one.
        check(all(abs(max(top.values()) - v) < 1e-6 for top, v in zip(lp.top_logprobs, lp.token_logprobs)),
              "greedy picks the top logprob")
        check(lp.text_offset == [len("".join(lp.tokens[:i])) for i in range(len(lp.tokens))],
              f"text_offset {lp.text_offset} for tokens {lp.tokens}")
        # A stop string that the text begins to match but never completes holds text back until it
        # parts: each token's offset still counts the tokens before it.
        if len(lp.tokens) > 3:
            stop = "".join(lp.tokens[2:4]) + "#~"
            held = client.completions.create(model="smollm2", prompt=prompt, max_tokens=6, temperature=0, logprobs=0,
                                             stop=[stop]).choices[0]
            check(held.text == choice.text and held.logprobs.tokens == lp.tokens
                  and held.logprobs.text_offset == lp.text_offset,
                  f"stop {stop!r}: {held.text!r}, tokens {held.logprobs.tokens}, text_offset {held.logprobs.text_offset}; "
                  f"without it {lp.text_offset}")
    stream = client.completions.create(model="smollm2", prompt=prompt, max_tokens=6, temperature=0, logprobs=3,
                                       stream=True)
    tokens, values = [], []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].logprobs:
            tokens += chunk.choices[0].logprobs.tokens
            values += chunk.choices[0].logprobs.token_logprobs
    check(lp is not None and tokens == lp.tokens and values == lp.token_logprobs, f"streamed logprobs {tokens} {values}")

    messages = [{"role": "user", "content": "Name a color."}]
    chat = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=5, temperature=0,
                                          logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content if chat.choices[0].logprobs else None
    check(content is not None and len(content) == chat.usage.completion_tokens, f"chat logprobs: {content}")
    if content:
        check(all(len(entry.top_logprobs) == 2 and entry.logprob == entry.top_logprobs[0].logprob for entry in content),
              "chat top_logprobs")
        check(all(bytes(entry.bytes).decode("utf-8", "replace") == entry.token for entry in content), "chat bytes")
    streamed = []
    for chunk in client.chat.completions.create(model="smollm2", messages=messages, max_tokens=5, temperature=0,
                                                logprobs=True, top_logprobs=2, stream=True):
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            streamed += [(entry.token, entry.logprob) for entry in chunk.choices[0].logprobs.content]
    check(content is not None and streamed == [(entry.token, entry.logprob) for entry in content],
          f"chat streamed logprobs {streamed}")

    # n choices with a seed: repeatable, streamed or not; usage counts every choice.
    kwargs = dict(model="smollm2", prompt="Once upon a time", max_tokens=8, temperature=1.0, seed=11, n=3)
    first = client.completions.create(**kwargs)
    again = client.completions.create(**kwargs)
    texts = [c.text for c in sorted(first.choices, key=lambda c: c.index)]
    check([c.index for c in first.choices] == [0, 1, 2], f"n=3 indices {[c.index for c in first.choices]}")
    check(texts == [c.text for c in sorted(again.choices, key=lambda c: c.index)], "a seeded request repeats")
    check(len(set(texts)) > 1, f"n=3 choices differ: {texts}")
    check(first.usage.completion_tokens == 24 or any(c.finish_reason == "stop" for c in first.choices),
          f"n=3 usage {first.usage}")
    check_usage(first.usage, "n=3")
    pieces = {}
    finishes = {}
    for chunk in client.completions.create(stream=True, **kwargs):
        for c in chunk.choices:
            pieces[c.index] = pieces.get(c.index, "") + c.text
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    check([pieces.get(i) for i in range(3)] == texts and len(finishes) == 3, f"n=3 streamed {pieces} vs {texts}")
    chat_n = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=4, n=2, temperature=0)
    check(len(chat_n.choices) == 2 and chat_n.choices[0].message.content == chat_n.choices[1].message.content,
          "greedy chat n=2 gives two equal choices")

    # logit_bias: +100 on one token makes it every token; -100 on it keeps it out even where the prompt
    # (that token repeated) makes it the likely continuation.
    forced = client.completions.create(model="smollm2", prompt=prompt, max_tokens=4, temperature=0, logprobs=0,
                                       logit_bias={"1000": 100})
    ftokens = forced.choices[0].logprobs.tokens
    check(len(ftokens) == 4 and len(set(ftokens)) == 1, f"logit_bias +100: {ftokens}")
    # -100 on the greedy answer's first token (its id from vLLM's return_tokens_as_token_ids) bans it.
    ids = dict(model="smollm2", prompt=prompt, max_tokens=4, temperature=0, logprobs=0,
               extra_body={"return_tokens_as_token_ids": True})
    free = client.completions.create(**ids).choices[0].logprobs.tokens
    check(all(re.fullmatch(r"token_id:\d+", t) for t in free), f"tokens as ids: {free}")
    banned_id = free[0].split(":")[1]
    banned = client.completions.create(logit_bias={banned_id: -100}, **ids).choices[0].logprobs.tokens
    check(free[0] not in banned, f"logit_bias -100 on {banned_id}: {free} -> {banned}")
    # Penalties (OpenAI's presence and frequency, vLLM's repetition) change a greedy continuation
    # long enough to repeat itself.
    longer = {**ids, "max_tokens": 32}
    unpenalised = client.completions.create(**longer).choices[0].logprobs.tokens
    check(len(set(unpenalised)) < len(unpenalised), f"greedy repeats itself: {unpenalised}")
    for penalty in ({"presence_penalty": 2}, {"frequency_penalty": 2}, {"extra_body": {"repetition_penalty": 50}}):
        extra = penalty.pop("extra_body", {})
        penalised = client.completions.create(**{**longer, "extra_body": {**ids["extra_body"], **extra}}, **penalty)
        check(penalised.choices[0].logprobs.tokens != unpenalised, f"{penalty or extra}: {unpenalised} unchanged")


def test_disconnect(port):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = json.dumps({"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 400, "stream": True,
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
        if values["vt_requests_running"] == 0 and request_blocks(values) == 0:
            break
        time.sleep(0.2)
    values = metrics(port)
    check(values["vt_requests_running"] == 0 and values["vt_requests_waiting"] == 0, f"after hang-up: {values}")
    check(request_blocks(values) == 0 and values["vt_state_slots_used"] == 0, f"cache after hang-up: {values}")
    check(values["vt_requests_cancelled_total"] >= 1, "the hang-up counted as a cancellation")


BAD_REQUESTS = [
    ("/v1/completions", {"prompt": "hi", "num_speculative_tokens": 2}),  # this server does not speculate
    ("/v1/completions", "{not json"),
    ("/v1/completions", "[1, 2, 3]"),
    ("/v1/completions", '"a string"'),
    ("/v1/completions", b'{"prompt": "caf\xc3\x28"}'),
    ("/v1/completions", {}),
    ("/v1/completions", {"prompt": ""}),
    ("/v1/completions", {"prompt": []}),
    ("/v1/completions", {"prompt": ["a", [1]]}),
    ("/v1/completions", {"prompt": [1, 10**9]}),
    ("/v1/completions", {"prompt": "hi", "model": "gpt-4"}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 0}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 10**7}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": "8"}),
    ("/v1/completions", {"prompt": "hi", "n": 9}),
    ("/v1/completions", {"prompt": "hi", "n": 0}),
    ("/v1/completions", {"prompt": "hi", "n": 2, "best_of": 4}),
    ("/v1/completions", {"prompt": "hi", "temperature": -1}),
    ("/v1/completions", '{"prompt": "hi", "temperature": NaN}'),
    ("/v1/completions", {"prompt": "hi", "top_p": 0}),
    ("/v1/completions", {"prompt": "hi", "top_p": 1.01}),
    ("/v1/completions", {"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}),
    ("/v1/completions", {"prompt": "hi", "logprobs": 6}),
    ("/v1/completions", {"prompt": "hi", "logprobs": "3"}),
    ("/v1/completions", {"prompt": "hi", "top_logprobs": 3}),
    ("/v1/completions", {"prompt": "hi", "logit_bias": {"49152": 5}}),
    ("/v1/completions", {"prompt": "hi", "logit_bias": {"-3": 5}}),
    ("/v1/completions", {"prompt": "hi", "logit_bias": {"abc": 5}}),
    ("/v1/completions", {"prompt": "hi", "logit_bias": {"5": 101}}),
    ("/v1/completions", {"prompt": "hi", "logit_bias": {"5": "x"}}),
    ("/v1/completions", {"prompt": "hi", "logit_bias": [1, 2]}),
    ("/v1/completions", {"prompt": "hi", "presence_penalty": 3}),
    ("/v1/completions", {"prompt": "hi", "frequency_penalty": -2.5}),
    ("/v1/completions", {"prompt": "hi", "repetition_penalty": 0}),
    ("/v1/completions", {"prompt": "hi", "echo": True}),
    ("/v1/completions", {"prompt": "hi", "suffix": "x"}),
    ("/v1/completions", {"prompt": "hi", "top_k": -5}),
    ("/v1/completions", {"prompt": "hi", "seed": "abc"}),
    ("/v1/completions", {"prompt": "hi", "stream": "yes"}),
    ("/v1/completions", {"prompt": "hi", "stop": 5}),
    ("/v1/completions", {"prompt": "hi", "stop": [""]}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": -1}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2.5}),
    ("/v1/completions", {"prompt": [1.5, 2]}),
    ("/v1/completions", {"prompt": [[1, 2], []]}),
    ("/v1/completions", {"prompt": "hi", "model": 7}),
    ("/v1/completions", {"prompt": "hi", "stream_options": {"include_usage": True}}),
    ("/v1/chat/completions", {}),
    ("/v1/chat/completions", {"messages": []}),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}),
    ("/v1/chat/completions", {"messages": "hello"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": 1}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
    ("/v1/chat/completions", {"messages": [{"content": "x"}]}),
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
    check(len(set(json.dumps(b) if not isinstance(b, bytes) else b.hex() for _, b in BAD_REQUESTS)) + 1 >= 40,
          "at least 40 distinct bad requests")
    check(raw(port, "GET", "/health")[0] == 200, "the server is up after bad requests")


def labeled_metrics(port):
    status, data = raw(port, "GET", "/metrics")
    values = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_speculative(vt, model):
    """vt serve --speculative ngram: n-gram drafts verified inside the batched steps."""
    process, port = start_server(vt, model, "--speculative", "ngram", "--num-draft", "4")
    try:
        prompt = ("Repeat the text exactly.\nText: The quick brown fox jumps over the lazy dog near the river bank, "
                  "and the dog sleeps on while the fox runs away into the forest.\nRepeated: The quick brown fox")

        def complete(drafts=None, text=prompt, **extra):
            body = {"model": "smollm2", "prompt": text, "max_tokens": 40, "temperature": 0, "logprobs": 2, **extra}
            if drafts is not None:
                body["num_speculative_tokens"] = drafts
            status, data = raw(port, "POST", "/v1/completions", body)
            check(status == 200, f"speculative server: {status} {data[:200]!r}")
            return json.loads(data)["choices"][0] if status == 200 else {}

        before = labeled_metrics(port)
        plain = complete(0)
        for drafts in (None, 1, 4):
            got = complete(drafts)
            check(got.get("text") == plain.get("text"), f"k={drafts}: {got.get('text')!r} != plain {plain.get('text')!r}")
            check(got.get("logprobs") == plain.get("logprobs"), f"k={drafts}: logprobs differ from plain decoding")
            check(got.get("finish_reason") == plain.get("finish_reason"), f"k={drafts}: finish_reason")
        stopped_plain, stopped = complete(0, stop=["lazy"]), complete(None, stop=["lazy"])
        check(stopped.get("text") == stopped_plain.get("text") and stopped.get("finish_reason") == "stop" and
              "lazy" not in stopped.get("text", "x"), f"stop string: {stopped!r} vs {stopped_plain!r}")
        seeded = [complete(None, temperature=0.8, seed=7, logprobs=None).get("text") for _ in range(2)]
        check(seeded[0] == seeded[1], f"a seeded sampled request repeats: {seeded}")

        # 16 at once, speculating (k 4, 2) and not, each equal to plain decoding. The last answers
        # after ~30 s on an idle 2-core machine; CI runs two tests at once (one timed out at 60 s).
        prompts = [prompt.replace("fox", f"fox number {i}") for i in range(4)]
        alone = [complete(0, text=p).get("text") for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            def one(i):
                status, data = raw(port, "POST", "/v1/completions",
                                   {"model": "smollm2", "prompt": prompts[i % 4], "max_tokens": 40, "temperature": 0,
                                    "num_speculative_tokens": [0, 2, 4, 4][i // 4]}, timeout=240)
                return json.loads(data)["choices"][0]["text"] if status == 200 else f"status {status}"
            together = list(pool.map(one, range(16)))
        for i, text in enumerate(together):
            check(text == alone[i % 4], f"concurrent speculative request {i}: {text!r} != alone {alone[i % 4]!r}")

        after = labeled_metrics(port)
        delta = {name: after[name] - before.get(name, 0) for name in after}
        steps, accepted = delta["vt_spec_decode_steps_total"], delta["vt_spec_accepted_tokens_total"]
        print(f"speculative: {accepted:.0f} drafts accepted in {steps:.0f} steps "
              f"({delta['vt_spec_emitted_tokens_total'] / max(steps, 1):.2f} tokens/step)", flush=True)
        check(accepted >= 10, f"the n-gram drafts of a copy task are accepted: {accepted} in {steps} steps")
        check(delta["vt_spec_emitted_tokens_total"] <= accepted + steps, "emitted <= accepted + steps")
        check(delta["vt_spec_emitted_tokens_total"] >= accepted, "emitted >= accepted")
        check(delta["vt_spec_accepted_tokens_per_step_count"] == steps, "histogram count = steps")
        check(delta["vt_spec_accepted_tokens_per_step_sum"] == accepted, "histogram sum = accepted")
        check(delta['vt_spec_accepted_tokens_per_step_bucket{le="+Inf"}'] == steps, "+Inf bucket = steps")
        drafted = sum(delta[f'vt_spec_position_drafted_total{{position="{i}"}}'] for i in range(4))
        check(drafted == delta["vt_spec_draft_tokens_total"], f"drafted by position {drafted} = drafted total")
        check(sum(delta[f'vt_spec_position_accepted_total{{position="{i}"}}'] for i in range(4)) == accepted,
              "accepted by position = accepted total")
        check(after["vt_generation_tokens_total"] - before["vt_generation_tokens_total"] >=
              delta["vt_spec_emitted_tokens_total"], "generated tokens include the speculative steps' tokens")

        for value in (5, -1, "2", 1.5):
            status, data = raw(port, "POST", "/v1/completions",
                               {"model": "smollm2", "prompt": "hi", "num_speculative_tokens": value})
            error = json.loads(data).get("error", {}) if data.startswith(b"{") else {}
            check(status == 400 and error.get("param") == "num_speculative_tokens",
                  f"num_speculative_tokens {value!r}: {status} {data[:200]!r}")
    finally:
        process.terminate()
        try:
            check(process.wait(timeout=20) == 0, "the speculative server exits 0 on SIGTERM")
        except subprocess.TimeoutExpired:
            process.kill()
            check(False, "the speculative server did not stop on SIGTERM")


def test_operations(vt, model):
    """A second server: CORS allow-list, the in-flight cap (429), and SIGTERM draining."""
    process, port = start_server(vt, model, "--max-concurrent-requests", "2", "--allowed-origins",
                                 "http://good.example,http://also.example", "--drain-timeout", "30")
    try:
        def preflight(origin):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("OPTIONS", "/v1/chat/completions", headers={
                "Origin": origin, "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type"})
            response = connection.getresponse()
            response.read()
            connection.close()
            return response.status, dict(response.getheaders())

        status, headers = preflight("http://good.example")
        check(status == 204 and headers.get("Access-Control-Allow-Origin") == "http://good.example"
              and "POST" in headers.get("Access-Control-Allow-Methods", "")
              and "authorization" in headers.get("Access-Control-Allow-Headers", ""), f"preflight allowed: {headers}")
        status, headers = preflight("http://evil.example")
        check(not any(h.startswith("Access-Control-") for h in headers), f"preflight refused: {status} {headers}")
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", "/v1/models", headers={"Origin": "http://also.example",
                                                         "Authorization": "Bearer " + API_KEY})
        response = connection.getresponse()
        response.read()
        check(response.status == 200 and response.getheader("Access-Control-Allow-Origin") == "http://also.example",
              "CORS header on an allowed origin's request")
        connection.request("GET", "/v1/models", headers={"Origin": "http://evil.example",
                                                         "Authorization": "Bearer " + API_KEY})
        response = connection.getresponse()
        response.read()
        check(response.getheader("Access-Control-Allow-Origin") is None, "no CORS header for another origin")
        connection.close()

        # Two streams in flight fill the cap; a third request gets 429 with an error object.
        def open_stream(max_tokens):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            connection.request("POST", "/v1/completions", body=json.dumps(
                {"model": "smollm2", "prompt": "Once upon a time", "max_tokens": max_tokens, "temperature": 0,
                 "stream": True}), headers={"Content-Type": "application/json", "Authorization": "Bearer " + API_KEY})
            response = connection.getresponse()
            check(response.status == 200, f"stream status {response.status}")
            response.readline()  # the first event
            return connection, response

        first, first_response = open_stream(60)
        second, second_response = open_stream(300)
        status, data = raw(port, "POST", "/v1/completions", {"model": "smollm2", "prompt": "hi", "max_tokens": 2})
        error = json.loads(data).get("error", {}) if data.startswith(b"{") else {}
        check(status == 429 and error.get("code") == "rate_limit_exceeded", f"beyond the cap: {status} {data[:200]!r}")
        second.sock.close()  # hang up: its slot frees
        second.close()
        deadline = time.time() + 10
        while time.time() < deadline and metrics(port)["vt_http_requests_in_flight"] > 1:
            time.sleep(0.1)
        check(metrics(port)["vt_http_requests_in_flight"] == 1, "a hung-up stream leaves the cap")

        # SIGTERM while the first stream runs: it completes, new requests get 503, the process exits 0.
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        status, data = raw(port, "POST", "/v1/completions", {"model": "smollm2", "prompt": "hi", "max_tokens": 2})
        check(status == 503 and b"error" in data, f"during the drain: {status} {data[:200]!r}")
        check(raw(port, "GET", "/health", key=None)[0] == 503, "/health is 503 while draining")
        rest = first_response.read().decode()
        check(rest.rstrip().endswith("data: [DONE]") and '"finish_reason":"length"' in rest,
              f"the stream in flight completes: {rest[-300:]!r}")
        first.close()
        code = process.wait(timeout=30)
        check(code == 0, f"vt serve exited {code} after draining")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


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
        for test in (lambda: test_basics(client, port), lambda: test_metrics_format(port),
                     lambda: test_completions(client), lambda: test_chat(client),
                     lambda: test_sampling_features(client), lambda: test_concurrent_streams(client, port, vt, model),
                     lambda: test_disconnect(port), lambda: test_bad_requests(port), lambda: test_completions(client)):
            t0 = time.time()
            test()
            print(f"  {time.time() - t0:.1f} s", flush=True)
        check(process.poll() is None, "the server is still running")
        values = metrics(port)
        check(values["vt_requests_running"] == 0 and values["vt_requests_waiting"] == 0 and
              request_blocks(values) == 0 and values["vt_state_slots_used"] == 0, f"final metrics {values}")
        test_metrics_format(port)
    finally:
        process.terminate()
        try:
            code = process.wait(timeout=20)
            check(code == 0, f"vt serve exited {code} on SIGTERM")
        except subprocess.TimeoutExpired:
            process.kill()
            check(False, "vt serve did not stop on SIGTERM")
    test_operations(vt, model)
    test_speculative(vt, model)
    print(f"{'FAILED' if failures else 'passed'} in {time.time() - started:.1f} s ({len(failures)} failures)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
