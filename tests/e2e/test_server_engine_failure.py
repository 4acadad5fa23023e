#!/usr/bin/env python3
"""`vt serve` on SmolLM2 whose 4th batched forward fails (--inject-fault-at-forward 4, a stand-in
for a CUDA error): a streaming request gets its first tokens, an error event and [DONE]; a
non-streaming one sent then gets a 503 (or a 500 if it got into the failed step); and the process
exits 1 by itself, for a supervisor to restart it.

  test_server_engine_failure.py VT_BINARY [MODEL.gguf]

Exits 77 (skipped) when the model is not fetched, unless VT_REQUIRE_SMOLLM2=1."""
import http.client
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vt_server import start_server  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def post(port, body):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    return response.status, response.read().decode()


def main():
    vt = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, ".cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        if os.environ.get("VT_REQUIRE_SMOLLM2") == "1":
            sys.exit(f"{model} is missing (scripts/fetch-smollm2.sh)")
        print(f"skipped: {model} is missing (scripts/fetch-smollm2.sh)")
        sys.exit(77)
    process, port = start_server(vt, model, "--inject-fault-at-forward", "4", "--drain-timeout", "10")
    failures = []
    try:
        request = {"model": os.path.splitext(os.path.basename(model))[0], "prompt": "The capital of France is",
                   "max_tokens": 32, "temperature": 0}
        status, body = post(port, {**request, "stream": True})
        events = [event[len("data: "):] for event in body.split("\n\n") if event.startswith("data: ")]
        if status != 200 or len(events) < 3 or events[-1] != "[DONE]" or "error" not in json.loads(events[-2]):
            failures.append(f"stream: {status} {body[-600:]}")
        elif "injected fault" not in json.loads(events[-2])["error"]["message"]:
            failures.append(f"stream's error event: {events[-2]}")
        if any(json.loads(event)["choices"][0]["finish_reason"] for event in events[:-2]):
            failures.append(f"a chunk claims the choice finished: {body[-600:]}")
        try:
            status, body = post(port, request)
            if status not in (500, 503) or "error" not in json.loads(body):
                failures.append(f"after the failure: {status} {body[:300]}")
        except (ConnectionError, http.client.HTTPException, OSError):
            pass  # the server has already gone: what a supervisor sees too
        try:
            code = process.wait(timeout=60)
        except Exception:
            process.kill()
            code = None
        if code != 1:
            failures.append(f"vt serve exited {code} after the failure, expected 1")
    finally:
        if process.poll() is None:
            process.kill()
    for failure in failures:
        print("FAIL:", failure)
    print("engine failure: " + ("ok" if not failures else "FAILED"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
