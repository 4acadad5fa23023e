#!/usr/bin/env python3
"""`vt serve` reads an HF folder's generation_config.json as HF generate and vLLM do: it stops on
every id of its eos_token_id list (not only the tokenizer's eos_token), and with --generation-config
auto (the default) requests that leave temperature / top_k / top_p / min_p / repetition_penalty out
get the file's values;
--generation-config vt keeps them greedy. On a copy of the trained golden model (CPU).

  test_generation_config.py VT_BINARY"""
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests/golden/qwen3_5_trained")
PROMPT = "Once upon a time"


def start(vt, model, *args):
    """`vt serve` on a free port: (process, port, the stderr lines before it listened)."""
    process = subprocess.Popen([vt, "--threads", "2", "serve", "--model", model, "--port", "0", *args],
                               stderr=subprocess.PIPE, text=True)
    lines, deadline = [], time.time() + 120
    while time.time() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        lines.append(line)
        match = re.search(r"listening on http://[\d.]+:(\d+)", line)
        if match:
            threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()
            return process, int(match.group(1)), lines
    process.kill()
    sys.exit("vt serve did not start:\n" + "".join(lines))


def complete(port, **fields):
    """A /v1/completions answer: (token ids, finish_reason)."""
    body = {"prompt": PROMPT, "max_tokens": 16, "logprobs": 0, "return_tokens_as_token_ids": True, **fields}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    text = response.read().decode()
    if response.status != 200:
        sys.exit(f"{response.status}: {text}")
    choice = json.loads(text)["choices"][0]
    return [int(token.split(":")[1]) for token in choice["logprobs"]["tokens"]], choice["finish_reason"]


def serve(vt, model, *args):
    process, port, lines = start(vt, model, *args)
    return process, port, "".join(lines)


def stop(process):
    process.terminate()
    process.wait(timeout=60)


def main():
    vt = sys.argv[1]
    failures = []
    work = tempfile.mkdtemp(prefix="vt_generation_config_")
    try:
        model = os.path.join(work, "model")
        shutil.copytree(GOLDEN, model)
        config_path = os.path.join(model, "generation_config.json")
        with open(config_path) as f:
            published = json.load(f)  # {"do_sample": false, "eos_token_id": 0, ...}: no sampling fields

        process, port, log = serve(vt, model)
        try:
            greedy, reason = complete(port)  # no temperature: greedy, the file has none
            seeded, _ = complete(port, seed=7)
        finally:
            stop(process)
        if "generation_config" in log:
            failures.append(f"a file without sampling fields was reported as applied: {log}")
        if reason != "length" or len(greedy) != 16 or seeded != greedy:
            failures.append(f"without sampling fields: {greedy} ({reason}), seeded {seeded}")
        # A later token the greedy run has not produced before becomes a second end-of-sequence id.
        cut = next(i for i in range(2, len(greedy)) if greedy[i] not in greedy[:i] and greedy[i] != 0)

        with open(config_path, "w") as f:
            json.dump({**published, "eos_token_id": [0, greedy[cut]], "temperature": 1.5, "top_k": 0, "top_p": 1.0}, f)
        process, port, log = serve(vt, model)
        try:
            stopped, reason = complete(port, temperature=0)
            sampled, _ = complete(port, seed=7)
            again, _ = complete(port, seed=7)
        finally:
            stop(process)
        if "temperature=1.5 top_k=0 top_p=1" not in log:
            failures.append(f"the start-up line does not name the model's sampling: {log}")
        # The end-of-sequence token ends the choice: counted and in the logprobs, as the tokenizer's is.
        if stopped != greedy[:cut + 1] or reason != "stop":
            failures.append(f"eos_token_id {greedy[cut]}: {stopped} ({reason}), expected {greedy[:cut + 1]} (stop)")
        if sampled == greedy[:len(sampled)] or sampled != again:
            failures.append(f"temperature 1.5 from the file, seed 7: {sampled} and {again}; greedy {greedy}")

        # vLLM also takes the file's repetition_penalty for requests that leave it out.
        with open(config_path, "w") as f:
            json.dump({**published, "repetition_penalty": 3.0}, f)
        process, port, log = serve(vt, model)
        try:
            penalised, _ = complete(port, temperature=0)
            unpenalised, _ = complete(port, temperature=0, repetition_penalty=1)
        finally:
            stop(process)
        if "repetition_penalty=3" not in log:
            failures.append(f"the start-up line does not name the model's repetition_penalty: {log}")
        if penalised == greedy or unpenalised != greedy:
            failures.append(f"repetition_penalty 3 from the file: {penalised}; with 1 asked: {unpenalised}; greedy {greedy}")

        with open(config_path, "w") as f:
            json.dump({**published, "eos_token_id": [0, greedy[cut]], "temperature": 1.5, "top_k": 0, "top_p": 1.0}, f)
        process, port, log = serve(vt, model, "--generation-config", "vt")
        try:
            plain, reason = complete(port, seed=7)
        finally:
            stop(process)
        if plain != greedy[:cut + 1] or reason != "stop":
            failures.append(f"--generation-config vt: {plain} ({reason}), expected {greedy[:cut + 1]} (stop)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for failure in failures:
        print("FAILED:", failure)
    print(f"test_generation_config: {'passed' if not failures else f'{len(failures)} failures'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
