#!/usr/bin/env python3
"""Two `vt serve` replicas on SmolLM2 (CPU) behind sglang-router's cache_aware policy, as a cluster
runs them: 4 multi-turn chat sessions of 3 turns (each turn the whole history plus a new user
message), the sessions' turns sent together. Every request through the router gets a 200 with
usage; the router spreads the sessions over both replicas and sends every later turn of a session
to the replica that served its first (told by the replicas' generated-token counters); and, once
the engine's prefix cache holds the earlier turns, the replicas report prefix-cache hits
(vllm:prefix_cache_hits_total) and the later turns cached prompt tokens.

  test_router.py VT_BINARY [MODEL.gguf]

Fails when sglang-router is not installed (tests/e2e/setup.sh installs it). Exits 77 (skipped) when
the model is not fetched, unless VT_REQUIRE_SMOLLM2=1."""
import concurrent.futures
import http.client
import importlib.util
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import vt_server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_NAME = "smollm2"
REPLICAS = 2
TURNS = 3
# Answer lengths per session, powers of two: a replica's generated-token count over a wave of turns
# is a unique sum that says which sessions it served. The end-of-text, turn-start and turn-end
# tokens (SmolLM2's ids) are banned so that every answer runs to its length.
ANSWER_TOKENS = [4, 8, 16, 32]
NO_END = {"0": -100, "1": -100, "2": -100}
# Each session opens with its own long, system-prompt-like message: alike in form but different from
# the first words on, so that the router's prefix tree tells the sessions apart, and long enough
# that a later turn's longest match is its own session's history.
TOPICS = ["lighthouse keepers on a stormy northern coast", "a bakery that opens before dawn in a mountain town",
          "a chess club in a small library", "beekeepers tending hives in a lavender valley"]
QUESTIONS = ["Describe the setting in one sentence.", "Who is the main character?", "What happens next?"]
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, flush=True)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def request(port, method, path, body=None, timeout=120):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=json.dumps(body) if body is not None else None,
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def metrics(port):
    """Samples by name (labels included as written)."""
    status, data = request(port, "GET", "/metrics", timeout=30)
    values = {}
    if status == 200:
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
    return values


def opening(session):
    topic = TOPICS[session]
    return (f"Session {session}: you are a storyteller who writes about {topic}. " +
            f"Keep every answer short, concrete and about {topic}; never change the subject. " * 6 +
            "Answer the user's questions one at a time.")


def stop(process, name):
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            print(f"{name} did not stop on SIGTERM: killed", flush=True)
            process.kill()
            process.wait()


def start_router(worker_ports, log):
    port = free_port()
    command = [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls",
               *[f"http://127.0.0.1:{p}" for p in worker_ports], "--policy", "cache_aware", "--host", "127.0.0.1",
               "--port", str(port), "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
               # Every request is answered by the worker it was routed to: a retry elsewhere would
               # hide a failure and blur which replica served it.
               "--disable-retries", "--worker-startup-check-interval", "1", "--log-level", "warn"]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline and process.poll() is None:
        try:
            status, data = request(port, "GET", "/readiness", timeout=5)
            if status == 200 and json.loads(data).get("healthy_workers") == len(worker_ports):
                return process, port
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    return process, None


def generated(port):
    return metrics(port).get("vt_generation_tokens_total", 0)


def place(deltas, lengths):
    """The one way to put the requests (their generated tokens in `lengths`) on replicas so that
    each replica's sum is its counter's delta; None when there is none or more than one."""
    fits = [assignment for assignment in itertools.product(range(len(deltas)), repeat=len(lengths))
            if all(sum(n for n, r in zip(lengths, assignment) if r == replica) == delta
                   for replica, delta in enumerate(deltas))]
    return fits[0] if len(fits) == 1 else None


def run_sessions(router_port, replica_ports):
    """Turn t of every session at once (the router sees them together, as in a cluster), then
    turn t + 1. Which replica served each request follows from the replicas' generated-token
    counters: session s's answers are forced to ANSWER_TOKENS[s] tokens, powers of two, so each
    replica's delta over a wave is a unique sum. Returns {session: [replica per turn]} and the
    cached prompt tokens each turn reported."""
    histories = {s: [{"role": "system", "content": opening(s)}] for s in range(len(TOPICS))}
    placement = {s: [] for s in histories}
    cached = {s: [] for s in histories}

    def turn_of(session):
        body = {"model": MODEL_NAME, "messages": histories[session], "max_tokens": ANSWER_TOKENS[session],
                "temperature": 0, "logit_bias": NO_END}
        status, data = request(router_port, "POST", "/v1/chat/completions", body)
        return status, json.loads(data) if status == 200 else data

    with concurrent.futures.ThreadPoolExecutor(len(histories)) as pool:
        for turn in range(TURNS):
            for session, history in histories.items():
                history.append({"role": "user", "content": QUESTIONS[turn]})
            before = [generated(p) for p in replica_ports]
            started = time.time()
            results = list(pool.map(turn_of, list(histories)))
            lengths = []
            for session, (status, answer) in zip(histories, results):
                check(status == 200, f"session {session} turn {turn}: status {status} {str(answer)[:300]}")
                if status != 200:
                    return placement, cached
                choice, usage = answer["choices"][0], answer.get("usage") or {}
                check(usage.get("completion_tokens") == ANSWER_TOKENS[session] and choice["finish_reason"] == "length",
                      f"session {session} turn {turn}: {usage.get('completion_tokens')} tokens "
                      f"({choice['finish_reason']}), want {ANSWER_TOKENS[session]} (end tokens banned)")
                histories[session].append({"role": "assistant", "content": choice["message"]["content"] or ""})
                cached[session].append((usage.get("prompt_tokens_details") or {}).get("cached_tokens"))
                lengths.append(usage.get("completion_tokens", 0))
            # Tokens are counted as they are made; allow the last step's a moment to land.
            deadline = time.time() + 5
            while True:
                deltas = [generated(p) - before[i] for i, p in enumerate(replica_ports)]
                if sum(deltas) >= sum(lengths) or time.time() > deadline:
                    break
                time.sleep(0.05)
            assignment = place(deltas, lengths)
            check(assignment is not None, f"turn {turn}: generated tokens per replica {deltas} do not tell which "
                                          f"replica served which of {lengths}")
            for session in histories:
                placement[session].append(assignment[session] if assignment else None)
            print(f"turn {turn}: replicas {[placement[s][-1] for s in histories]} per session, cached prompt tokens "
                  f"{[cached[s][-1] for s in histories]}, {time.time() - started:.1f} s", flush=True)
    return placement, cached


def main():
    vt = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, ".cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        if os.environ.get("VT_REQUIRE_SMOLLM2") == "1":
            sys.exit(f"{model} is missing (scripts/fetch-smollm2.sh)")
        print(f"skipped: {model} is missing (scripts/fetch-smollm2.sh)")
        sys.exit(77)
    if importlib.util.find_spec("sglang_router") is None:
        sys.exit("sglang-router is not installed: python3 -m pip install -r tests/e2e/requirements-router.txt "
                 "(tests/e2e/setup.sh does it)")
    started = time.time()
    replicas, router = [], None
    log = tempfile.TemporaryFile(mode="w+")
    try:
        for _ in range(REPLICAS):
            replicas.append(vt_server.start_server(vt, model, "--served-model-name", MODEL_NAME))
        replica_ports = [port for _, port in replicas]
        router, router_port = start_router(replica_ports, log)
        if router_port is None:
            log.seek(0)
            sys.exit(f"sglang-router did not become ready with {REPLICAS} workers:\n{log.read()[-3000:]}")
        print(f"router on {router_port}, replicas on {replica_ports} ({time.time() - started:.1f} s)", flush=True)

        hits_before = sum(metrics(p).get(f'vllm:prefix_cache_hits_total{{engine="0",model_name="{MODEL_NAME}"}}', 0)
                          for p in replica_ports)
        placement, cached = run_sessions(router_port, replica_ports)
        for session, replicas_used in placement.items():
            check(len(replicas_used) == TURNS and len(set(replicas_used)) == 1 and None not in replicas_used,
                  f"session {session}: its turns landed on replicas {replicas_used} (want one replica for all)")
        per_replica = [sum(1 for r in placement.values() if r and r[0] == i) for i in range(REPLICAS)]
        print(f"sessions per replica: {per_replica}", flush=True)
        # Else the affinity above says nothing: one replica would serve everything.
        check(all(count > 0 for count in per_replica), f"the router spread the sessions: {per_replica} per replica")

        # Needs the engine's prefix cache: each later turn extends the state its replica saved.
        hits = sum(metrics(p).get(f'vllm:prefix_cache_hits_total{{engine="0",model_name="{MODEL_NAME}"}}', 0)
                   for p in replica_ports) - hits_before
        check(hits > 0, f"prefix-cache hits over the replicas after turns >= 2: {hits:.0f} (want > 0)")
        for session, counts in cached.items():
            check(all(isinstance(count, int) for count in counts), f"session {session}: cached_tokens {counts}")
            check(all(isinstance(count, int) and count > 0 for count in counts[1:]),
                  f"session {session}: cached prompt tokens per turn {counts} (want > 0 from turn 2)")
        for port in replica_ports:
            values = metrics(port)
            check(values.get("vt_requests_running") == 0 and values.get("vt_http_requests_in_flight") == 0,
                  f"replica {port} idle after the sessions")
    finally:
        if router is not None:
            stop(router, "sglang-router")
        for process, _ in replicas:
            stop(process, "vt serve")
        if failures and router is not None:
            log.seek(0)
            print("sglang-router log (tail):\n" + log.read()[-3000:], flush=True)
        log.close()
    print(f"{'FAILED' if failures else 'passed'} in {time.time() - started:.1f} s ({len(failures)} failures)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
