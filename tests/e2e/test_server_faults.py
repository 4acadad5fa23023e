#!/usr/bin/env python3
"""`vt serve` under hostile and heavy load on loopback (CPU, SmolLM2-135M-Instruct), in CI.

  test_server_faults.py VT_BINARY [MODEL.gguf]

With 400 sockets dripping header lines, and separately 1,000 idle connections, /health answers
within 1 s and a completion completes; a 40 MB chunked body gets 413 with the server's RSS growing
under 200 MB; a non-streaming request whose client hangs up is cancelled within 10 s; 500
connections at once are all accepted without a dropped SYN (the listen backlog) and answered; a
kept-alive connection answers small requests without the 40 ms of Nagle and delayed ACKs; a short
stream waits for a token no more than 15% of a long prompt's prefill (small CPU chunks), and the
p99 of its gaps between tokens stays under 5% of it (the step budget by cost shrinks chunks deep
in the prompt; --step-cost-context 256 so that a 1,200-token prompt crosses C); beyond
--max-connections a connection gets a 503; a stream the drain cuts short ends with finish_reason,
an error event and [DONE], and the server exits 0. The scenarios live in scripts/serve_faults.py.
Exits 77 (skipped) when the model is not fetched, unless VT_REQUIRE_SMOLLM2=1.
"""
import json
import os
import signal
import socket
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import serve_faults  # noqa: E402

import vt_server

API_KEY = "faults-key"


def start_server(vt, model, *extra):
    return vt_server.start_server(vt, model, "--api-key", API_KEY, "--served-model-name", "smollm2", *extra)


def burst(target, count=500):
    """`count` connections at once: each accepted at once (a SYN dropped for a full listen queue is
    retried after 1 s, and a client with a short connect timeout then ends with no status)."""
    barrier = threading.Barrier(count)
    results = []

    def one():
        barrier.wait()
        start = time.time()
        try:
            sock = socket.create_connection(("127.0.0.1", target.port), timeout=10)
            connected = time.time() - start
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            sock.settimeout(30)
            head = sock.recv(12)
            sock.close()
            results.append((connected, head))
        except OSError as error:
            results.append((time.time() - start, repr(error).encode()))

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    answered = sum(1 for _, head in results if head == b"HTTP/1.1 200")
    slowest = max(connected for connected, _ in results)
    target.check(answered == count, f"burst: {answered} of {count} connections at once answered 200")
    target.check(slowest < 1.0, f"burst: the slowest connect took {slowest:.2f} s (< 1 s: no SYN dropped)")


def keep_alive_latency(target, count=8):
    """Small requests on one kept-alive connection: no 40 ms stalls (TCP_NODELAY)."""
    sock = socket.create_connection(("127.0.0.1", target.port), timeout=10)
    times = []
    while len(times) < count:
        start = time.time()
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while not data.endswith(b"}"):
            more = sock.recv(4096)
            if not more:  # the server may close a kept-alive connection: measure on a new one
                break
            data += more
        if data.endswith(b"}"):
            times.append(time.time() - start)
        else:
            sock.close()
            sock = socket.create_connection(("127.0.0.1", target.port), timeout=10)
    sock.close()
    times.sort()
    target.check(times[len(times) // 2] < 0.02, f"keep-alive: median /health {times[len(times) // 2] * 1000:.1f} ms "
                                                f"(< 20 ms), slowest {times[-1] * 1000:.1f} ms")


def kept_alive_get(sock, path):
    """GET `path` on a kept-alive socket; its body (b"" when the answer does not come whole)."""
    sock.settimeout(30)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        if not more:
            return b""
        data += more
    head, body = data.split(b"\r\n\r\n", 1)
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        more = sock.recv(65536)
        if not more:
            return b""
        body += more
    return body


def connection_cap(vt, model, failures):
    process, port = start_server(vt, model, "--max-connections", "40")
    target = serve_faults.Target(port, API_KEY, process.pid)
    # Target asked /v1/models on a connection it closed; the server counts it open until it reads
    # the EOF, which on a loaded 2-core machine can come after the 40 below (then the 40th got the
    # 503: CI, stop 44). So the first held connection asks /metrics, kept alive, until it is the
    # only one counted.
    held = serve_faults.open_sockets(1, port)
    deadline = time.time() + 30
    while held and time.time() < deadline and kept_alive_get(held[0], "/metrics").count(
            b"\nvt_http_connections_open 1\n") == 0:
        time.sleep(0.05)
    held += serve_faults.open_sockets(39, port)
    # Each held connection answers a kept-alive /health first: then the server has accepted and
    # counted all 40 before the 41st comes, however late its accept loop runs on a loaded machine.
    answered = 0
    for held_sock in held:
        held_sock.settimeout(30)
        try:
            held_sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while not data.endswith(b"}"):
                more = held_sock.recv(4096)
                if not more:
                    break
                data += more
            answered += data.startswith(b"HTTP/1.1 200") and data.endswith(b"}")
        except OSError:
            pass
    target.check(answered == 40, f"cap: {answered} of 40 held connections ({len(held)} opened) answered /health "
                                 "and stay open")
    # 30 s: on a loaded 2-core CI machine the server's accept loop may run late; a connection that
    # is not refused waits for its request until the 10 s header timeout and then gets no 503.
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.settimeout(30)
    start = time.time()
    try:
        answer = sock.recv(4096)
    except OSError as error:
        answer = repr(error).encode()
    waited = time.time() - start
    sock.close()
    target.check(answer.startswith(b"HTTP/1.1 503") and b'"error"' in answer,
                 f"cap: connection 41 of --max-connections 40 gets a 503 in {waited:.2f} s ({answer[:40]!r})")
    for held_sock in held:
        held_sock.close()
    time.sleep(0.5)
    target.check(target.health_seconds() is not None, "cap: /health answers once connections close")
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)
    failures += target.failures


def drain_cuts_stream(vt, model, failures):
    """SIGTERM with a stream longer than --drain-timeout: it ends with finish_reason, an error and [DONE]."""
    process, port = start_server(vt, model, "--drain-timeout", "1")
    target = serve_faults.Target(port, API_KEY, process.pid)
    body = json.dumps({"model": "smollm2", "prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", "max_tokens": 6000,
                       "temperature": 0, "stream": True})
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
    data = sock.recv(65536)
    process.send_signal(signal.SIGTERM)
    try:
        while not data.endswith(b"0\r\n\r\n"):
            more = sock.recv(65536)
            if not more:
                break
            data += more
    except OSError:
        pass
    sock.close()
    text = data.decode(errors="replace")
    target.check('"finish_reason":"cancelled"' in text, "drain: the cut stream has finish_reason 'cancelled'")
    target.check('data: {"error":' in text, "drain: the cut stream has an error event")
    target.check("data: [DONE]" in text[-100:] and text.endswith("\r\n0\r\n\r\n"),
                 "drain: the cut stream ends with [DONE] and the last chunk")
    code = process.wait(timeout=60)
    target.check(code == 0, f"drain: exit status {code}")
    failures += target.failures


def main():
    vt = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, ".cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        if os.environ.get("VT_REQUIRE_SMOLLM2") == "1":
            sys.exit(f"missing {model} (scripts/fetch-smollm2.sh)")
        print(f"skipped: {model} not fetched (scripts/fetch-smollm2.sh)")
        sys.exit(77)
    serve_faults.raise_descriptor_limit(4096)
    start = time.time()
    # C = 256 rather than the model's 3072 (past which its chunks shrink): a prompt that crosses
    # 3072 takes minutes to prefill on two cores.
    process, port = start_server(vt, model, "--step-cost-context", "256")
    target = serve_faults.Target(port, API_KEY, process.pid)
    try:
        serve_faults.slowloris(target, count=400)
        serve_faults.idle(target, count=1000)
        serve_faults.chunked(target, megabytes=40)
        serve_faults.hangup(target, max_tokens=6000, within=10.0)
        burst(target)
        keep_alive_latency(target)
        # A ~1,200-token prompt: in 256-token chunks a short stream waited 36% of its prefill for a
        # token (7.4 of 20.5 s), in 64-token chunks 7% (1.0 of 13.2 s). The p99 gap between its
        # tokens: 7.2% of the prefill in whole 64-token chunks (1.74 of 24.3 s), 2.9% with the cost
        # budget (0.70 of 24.3 s; docs/perf/2026-12-05-prefill-fairness-cpu.md).
        serve_faults.fairness(target, prompt_words=1200, max_share=0.15, max_p99_share=0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    failures = list(target.failures)
    connection_cap(vt, model, failures)
    drain_cuts_stream(vt, model, failures)
    print(f"{'passed' if not failures else 'FAILED'} in {time.time() - start:.1f} s ({len(failures)} failures)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
