#!/usr/bin/env python3
"""`vt bench serve` at 32 concurrent clients against the in-process server on SmolLM2 (CPU):
every request ends with an HTTP status (200 here), each run reports the server's engine steps, and
the server holds nothing once the load is gone (running, waiting, KV blocks, slots, in flight).

  test_bench_serve.py VT_BINARY [MODEL.gguf]

Exits 77 (skipped) when the model is not fetched, unless VT_REQUIRE_SMOLLM2=1."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENTS = 32


def main():
    vt = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, ".cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        if os.environ.get("VT_REQUIRE_SMOLLM2") == "1":
            sys.exit(f"{model} is missing (scripts/fetch-smollm2.sh)")
        print(f"skipped: {model} is missing (scripts/fetch-smollm2.sh)")
        sys.exit(77)
    result = subprocess.run([vt, "--threads", "2", "bench", "serve", "--model", model, "--concurrency", str(CLIENTS),
                             "--workload", "chat", "--requests", str(CLIENTS), "--chat-tokens", "8", "--json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        sys.exit(f"vt bench serve failed ({result.returncode}):\n{result.stderr[-2000:]}")
    report = json.loads(result.stdout)
    failures = []
    for run in report["runs"]:
        if run["requests"] != CLIENTS or run["status_counts"] != {"200": CLIENTS}:
            failures.append(f"{run['concurrency']} clients: {run['requests']} requests, statuses {run['status_counts']}")
        if run["engine_steps"]["count"] <= 0:
            failures.append(f"no engine steps recorded: {run['engine_steps']}")
    after = report["server_after"]
    for gauge in ("vt_requests_running", "vt_requests_waiting", "vt_kv_blocks_used", "vt_state_slots_used",
                  "vt_http_requests_in_flight"):
        if after.get(gauge, -1) != 0:
            failures.append(f"{gauge} = {after.get(gauge)} after the load")
    for failure in failures:
        print("FAIL:", failure)
    print(f"{len(report['runs'])} run(s) at {CLIENTS} clients: {'ok' if not failures else 'FAILED'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
