#!/usr/bin/env python3
"""`vt bench serve` at 32 concurrent clients against the in-process server on SmolLM2 (CPU), for
--duration 3 s (the first 32 requests, all sent at once, outlast it) with --cancel-fraction 0.1:
the clients hang up on some requests mid-stream, every other request gets a 200 and none ends
without a status, each run reports the server's engine steps, and the server holds nothing once
the load is gone (running, waiting, KV blocks, slots, in flight; the bench checks that itself and
exits non-zero otherwise).

  test_bench_serve.py VT_BINARY [MODEL.gguf] [--plain]   (--plain: 32 requests, no cancellations)

Exits 77 (skipped) when the model is not fetched, unless VT_REQUIRE_SMOLLM2=1."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENTS = 32
DURATION = 3  # seconds of load: the first 32 requests, all sent at once


def main():
    cancel = "--plain" not in sys.argv
    positional = [arg for arg in sys.argv[1:] if arg != "--plain"]
    vt = positional[0]
    model = positional[1] if len(positional) > 1 else os.path.join(ROOT, ".cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        if os.environ.get("VT_REQUIRE_SMOLLM2") == "1":
            sys.exit(f"{model} is missing (scripts/fetch-smollm2.sh)")
        print(f"skipped: {model} is missing (scripts/fetch-smollm2.sh)")
        sys.exit(77)
    command = [vt, "--threads", "2", "bench", "serve", "--model", model, "--concurrency", str(CLIENTS),
               "--workload", "chat", "--json"]
    if cancel:
        command += ["--duration", str(DURATION), "--chat-tokens", "12", "--cancel-fraction", "0.1", "--seed", "3"]
    else:
        command += ["--requests", str(CLIENTS), "--chat-tokens", "8"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        sys.exit(f"vt bench serve failed ({result.returncode}):\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    report = json.loads(result.stdout)
    failures = []
    for run in report["runs"]:
        outcomes = run["outcomes"]
        if cancel:
            if outcomes["ok"] + outcomes["cancelled"] != run["requests"] or outcomes["cancelled"] == 0:
                failures.append(f"{run['requests']} requests: outcomes {outcomes}, statuses {run['status_counts']}")
            if run["status_counts"].get("0", 0) or any(status != "200" for status in run["status_counts"]):
                failures.append(f"a request without a 200: statuses {run['status_counts']}")
        elif run["requests"] != CLIENTS or run["status_counts"] != {"200": CLIENTS} or outcomes["ok"] != CLIENTS:
            failures.append(f"{run['concurrency']} clients: {run['requests']} requests, statuses {run['status_counts']}")
        if run["engine_steps"]["count"] <= 0:
            failures.append(f"no engine steps recorded: {run['engine_steps']}")
    after = report["server_after"]
    for gauge in ("vt_requests_running", "vt_requests_waiting", "vt_state_slots_used",
                  "vt_http_requests_in_flight"):
        if after.get(gauge, -1) != 0:
            failures.append(f"{gauge} = {after.get(gauge)} after the load")
    # KV blocks left are those only the prefix cache holds (saved prompts share their blocks).
    if after.get("vt_kv_blocks_used", -1) != after.get("vt_prefix_cache_blocks", 0):
        failures.append(f"KV blocks held by requests after the load: {after}")
    if not after.get("back_to_zero"):
        failures.append(f"the bench did not see the server idle: {after.get('gauges')}")
    if cancel:
        # A hang-up after a request's last token cancels nothing: the server's count may be lower.
        if after.get("vt_requests_cancelled_total", 0) <= 0:
            failures.append(f"the server cancelled no request: {after}")
    for failure in failures:
        print("FAIL:", failure)
    runs = ", ".join(f"{run['requests']} requests {run['outcomes']}" for run in report["runs"])
    print(f"{len(report['runs'])} run(s) at {CLIENTS} clients{' with cancellations' if cancel else ''}: {runs}: "
          f"{'ok' if not failures else 'FAILED'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
