#!/usr/bin/env python3
"""A short stream beside a long prompt's prefill on `vt serve` (CPU, SmolLM2): the gaps between its
tokens (docs/perf/2026-12-05-prefill-fairness-cpu.md).

  prefill_fairness.py VT --words N --delay S --stream-tokens K [--label L] [-- SERVE_ARGS...]

Starts `vt --threads 2 serve` (with --step-trace /tmp/prefill_fairness_L.jsonl), sends an N-word
prompt (max_tokens 1), after S seconds a K-token greedy stream, and prints the long request's time
and the stream's median, p99 and largest gap."""
import argparse
import http.client
import json
import os
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import serve_faults  # noqa: E402
import vt_server  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("vt")
    parser.add_argument("--model", default=os.path.join(ROOT, ".cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--words", type=int, default=4000)
    parser.add_argument("--delay", type=float, default=100)
    parser.add_argument("--stream-tokens", type=int, default=40)
    parser.add_argument("--stream-prompt", default="1, 2, 3, 4, 5, 6, 7, 8, 9, 10,")
    parser.add_argument("--label", default="run")
    parser.add_argument("serve_args", nargs="*")
    args = parser.parse_args()
    process, port = vt_server.start_server(args.vt, args.model, "--served-model-name", "smollm2", "--step-trace",
                                           f"/tmp/prefill_fairness_{args.label}.jsonl", *args.serve_args)
    target = serve_faults.Target(port, None, process.pid)
    result = {}
    thread = threading.Thread(target=lambda: result.update(
        long=target.completion(max_tokens=1, timeout=900, prompt="word " * args.words)))
    thread.start()
    time.sleep(args.delay)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    body = {"model": "smollm2", "prompt": args.stream_prompt, "max_tokens": args.stream_tokens, "temperature": 0,
            "stream": True}
    connection.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    arrivals = []
    for line in connection.getresponse():
        if line.startswith(b"data: {"):
            arrivals.append(time.time())
        if line.strip() == b"data: [DONE]":
            break
    thread.join()
    gaps = sorted(b - a for a, b in zip(arrivals, arrivals[1:]))
    p99 = gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))]
    print(f"{args.label}: long request {result['long']}, stream after {args.delay} s: {len(arrivals)} tokens, "
          f"gaps median {gaps[len(gaps) // 2]:.2f} s, p99 {p99:.2f} s, max {gaps[-1]:.2f} s", flush=True)
    process.terminate()
    process.wait()


if __name__ == "__main__":
    main()
