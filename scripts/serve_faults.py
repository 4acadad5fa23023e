#!/usr/bin/env python3
"""Load and faults against a running `vt serve` on loopback: what a hostile or heavy client does.

  serve_faults.py --port P [--key KEY] [--pid PID] SCENARIO [SCENARIO ...]

Scenarios (each bounded in time; addresses are loopback only):
  slowloris   N sockets drip one header line a second; /health and a completion must answer
  idle        N connections open and silent; /health and a completion must answer
  chunked     a chunked body of M MB must get 413 with the server's RSS growing < 200 MB (needs --pid)
  hangup      a non-streaming request whose client hangs up must be cancelled within 10 s
  storm       C streams that hang up after a few tokens; running, waiting and KV blocks back to 0
              (with --under-load, another load is running: only every request's outcome is checked)
  status      C clients x R requests (streamed or not, new connection or kept alive): each must end
              with an HTTP status and a complete body (streams: a finish_reason and [DONE])
  soak        `status` repeated for S seconds with 10% hang-ups, the server's RSS sampled (needs --pid)
  sigterm     SIGTERM under load: in-flight requests end with 200 (cut streams properly) or 503 (needs --pid)
  fairness    a short stream while a ~2,700-token prompt prefills: its TTFT, largest and p99 gap
Prints one line per check and exits 1 if any failed. tests/e2e/test_server_faults.py runs the CI set.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import random
import resource
import signal
import socket
import sys
import threading
import time

HOST = "127.0.0.1"


def raise_descriptor_limit(wanted):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


class Target:
    def __init__(self, port, key=None, pid=None, model=None):
        self.port, self.key, self.pid = port, key, pid
        self.failures = []
        # The served model's name unless given: the server refuses any other (404).
        self.model = model or json.loads(self.request("GET", "/v1/models")[1])["data"][0]["id"]

    def check(self, condition, message):
        print(("ok:   " if condition else "FAIL: ") + message, flush=True)
        if not condition:
            self.failures.append(message)

    def headers(self):
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = "Bearer " + self.key
        return headers

    def request(self, method, path, body=None, timeout=30):
        connection = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            connection.request(method, path, body=json.dumps(body) if body is not None else None, headers=self.headers())
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def health_seconds(self, timeout=5.0):
        """Seconds /health takes on a new connection, or None when it does not answer 200 in time."""
        start = time.time()
        try:
            status, _ = self.request("GET", "/health", timeout=timeout)
            return time.time() - start if status == 200 else None
        except OSError:
            return None

    def completion(self, max_tokens=2, timeout=60, **extra):
        body = {"model": self.model, "prompt": "The capital of France is", "max_tokens": max_tokens, "temperature": 0}
        body.update(extra)
        start = time.time()
        try:
            status, data = self.request("POST", "/v1/completions", body, timeout=timeout)
            return status, time.time() - start
        except OSError as error:
            return repr(error), time.time() - start

    def metrics(self):
        _, data = self.request("GET", "/metrics")
        values = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#") and "{" not in line:
                name, value = line.split()
                values[name] = float(value)
        return values

    def rss_mb(self):
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def wait_idle(self, seconds):
        """True once running, waiting and KV blocks are all 0 (within `seconds`)."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            values = self.metrics()
            if values["vt_requests_running"] == 0 and values["vt_requests_waiting"] == 0 and \
                    values["vt_kv_blocks_used"] == values.get("vt_prefix_cache_blocks", 0):
                return True
            time.sleep(0.2)
        return False


def open_sockets(count, port):
    sockets = []
    for _ in range(count):
        try:
            sockets.append(socket.create_connection((HOST, port), timeout=5))
        except OSError:
            break
    return sockets


def under_pressure(target, name, sockets, hold_seconds, drip=None):
    """/health and a completion while `sockets` are held (dripped by `drip` every second)."""
    stop = threading.Event()

    def dripper():
        line = 0
        while not stop.wait(1.0):
            for sock in sockets:
                try:
                    drip(sock, line)
                except OSError:
                    pass
            line += 1

    thread = threading.Thread(target=dripper, daemon=True) if drip else None
    if thread:
        thread.start()
    try:
        time.sleep(1.5)  # the server has seen every socket
        worst = 0.0
        for _ in range(3):
            seconds = target.health_seconds(timeout=5)
            worst = max(worst, seconds if seconds is not None else 99)
            time.sleep(0.3)
        target.check(worst < 1.0, f"{name}: /health answers within 1 s with {len(sockets)} sockets held "
                                  f"(worst {worst:.3f} s)")
        status, seconds = target.completion(timeout=max(hold_seconds, 30))
        target.check(status == 200, f"{name}: a completion answers 200 meanwhile ({status}, {seconds:.2f} s)")
    finally:
        stop.set()
        if thread:
            thread.join()
        for sock in sockets:
            sock.close()


def slowloris(target, count=400, hold_seconds=30):
    sockets = open_sockets(count, target.port)
    for sock in sockets:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    under_pressure(target, "slowloris", sockets, hold_seconds,
                   drip=lambda sock, line: sock.sendall(f"X-Drip-{line}: {line}\r\n".encode()))


def idle(target, count=1000, hold_seconds=30):
    under_pressure(target, "idle", open_sockets(count, target.port), hold_seconds)


def chunked(target, megabytes=40):
    """A chunked body past --max-body-bytes: 413 before it is all read, RSS growth < 200 MB."""
    before = target.rss_mb()
    sock = socket.create_connection((HOST, target.port), timeout=30)
    head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
           "Transfer-Encoding: chunked\r\n"
    if target.key:
        head += f"Authorization: Bearer {target.key}\r\n"
    sock.sendall((head + "\r\n").encode())
    piece = b"word " * (64 * 1024 // 5)
    sent, peak = 0, before
    start = time.time()
    try:
        # A valid JSON body: a server that reads it all goes on to tokenise the prompt.
        for data in [b'{"model": "smollm2", "max_tokens": 1, "prompt": "'] + \
                [piece] * ((megabytes << 20) // len(piece)) + [b'"}']:
            sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))
            sent += len(data)
            if sent % (4 << 20) < len(piece):
                peak = max(peak, target.rss_mb())
        sock.sendall(b"0\r\n\r\n")
    except OSError:
        pass  # the server answered and closed before the body ended
    response = b""
    try:
        sock.settimeout(10)
        while not response.endswith(b"}") and len(response) < 65536:
            data = sock.recv(65536)
            if not data:
                break
            response += data
    except OSError:
        pass
    sock.close()
    peak = max(peak, target.rss_mb())
    status = response.split(b" ", 2)[1].decode() if response.startswith(b"HTTP/1.1 ") else repr(response[:60])
    target.check(status == "413", f"chunked: {sent >> 20} of {megabytes} MB sent, answered {status} in "
                                  f"{time.time() - start:.1f} s")
    target.check(peak - before < 200, f"chunked: RSS grew {peak - before:.0f} MB (< 200 MB)")


def hangup(target, max_tokens=6000, within=10.0):
    """A non-streaming request whose client hangs up is cancelled (vt_requests_running back to 0)."""
    before = target.metrics()
    body = json.dumps({"model": target.model, "prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,",  # counting goes on
                       "max_tokens": max_tokens, "temperature": 0})
    sock = socket.create_connection((HOST, target.port), timeout=10)
    head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
           f"Content-Length: {len(body)}\r\n"
    if target.key:
        head += f"Authorization: Bearer {target.key}\r\n"
    sock.sendall((head + "\r\n" + body).encode())
    deadline = time.time() + 30
    while time.time() < deadline and target.metrics()["vt_requests_running"] < 1:
        time.sleep(0.1)
    started = target.metrics()["vt_requests_running"] >= 1
    target.check(started, "hangup: the request runs")
    time.sleep(1.0)
    sock.close()
    closed = time.time()
    while time.time() < closed + within + 5 and target.metrics()["vt_requests_running"] > 0:
        time.sleep(0.1)
    seconds = time.time() - closed
    after = target.metrics()
    target.check(after["vt_requests_running"] == 0 and seconds <= within,
                 f"hangup: cancelled {seconds:.2f} s after the client hung up (within {within:.0f} s)")
    target.check(after["vt_requests_cancelled_total"] > before["vt_requests_cancelled_total"],
                 "hangup: counted as cancelled")


def one_request(target, index, stream, keep=None, hang_after=0, max_tokens=8):
    """Returns (outcome, detail): 'ok', 'hung up' (by us), 'status N', or 'no status' with the error."""
    connection = keep or http.client.HTTPConnection(HOST, target.port, timeout=600)
    body = {"model": target.model, "prompt": f"Here is one short sentence about the number {index}, and here is",
            "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    start, phase = time.time(), "connect"
    try:
        if connection.sock is None:
            connection.connect()
        phase = "send"
        connection.request("POST", "/v1/completions", body=json.dumps(body), headers=target.headers())
        phase = "wait for the status"
        response = connection.getresponse()
    except (OSError, http.client.HTTPException) as error:
        connection.close()
        return "no status", f"{repr(error)} at {phase}, {time.time() - start:.1f} s in"
    try:
        if response.status != 200:
            response.read()
            return f"status {response.status}", ""
        if not stream:
            data = json.loads(response.read())
            return ("ok", "") if data["choices"][0]["finish_reason"] in ("stop", "length") else ("bad body", str(data))
        finish, done, tokens = None, False, 0
        for line in response:
            line = line.strip()
            if line == b"data: [DONE]":
                done = True
                response.read()  # the last chunk, so that a kept-alive connection can be used again
                break
            if line.startswith(b"data: "):
                chunk = json.loads(line[6:])
                if chunk.get("choices"):
                    finish = chunk["choices"][0].get("finish_reason") or finish
                    tokens += 1
                    if hang_after and tokens >= hang_after:
                        connection.close()
                        return "hung up", ""
        return ("ok", "") if done and finish else ("cut stream", f"finish {finish} done {done}")
    except (OSError, http.client.HTTPException, ValueError) as error:
        return "cut stream", repr(error)
    finally:
        if keep is None:
            connection.close()


def status(target, clients=32, requests=2, hang_fraction=0.0, seconds=None, keep_alive=False, max_tokens=8):
    """Every request ends with a status and a whole body; returns the outcome counts."""
    outcomes, details = {}, []
    lock = threading.Lock()
    end = time.time() + seconds if seconds else None

    def client(number):
        rng = random.Random(number)
        keep = http.client.HTTPConnection(HOST, target.port, timeout=600) if keep_alive else None
        done = 0
        while (end is None and done < requests) or (end is not None and time.time() < end):
            hang = rng.random() < hang_fraction
            outcome, detail = one_request(target, number * 1000 + done, stream=rng.random() < 0.5, keep=keep,
                                          hang_after=rng.randint(1, 4) if hang else 0, max_tokens=max_tokens)
            if outcome == "hung up" and keep is not None:
                keep = http.client.HTTPConnection(HOST, target.port, timeout=600)
            with lock:
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                if detail and outcome != "ok":
                    details.append(f"{outcome}: {detail}")
            done += 1
        if keep is not None:
            keep.close()

    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    total = sum(outcomes.values())
    bad = total - outcomes.get("ok", 0) - outcomes.get("hung up", 0)
    print(f"status: {clients} clients, {total} requests in {time.time() - start:.1f} s: {outcomes}", flush=True)
    for detail in sorted(set(details))[:10]:
        print("   ", detail, flush=True)
    target.check(bad == 0, f"status: every request ended with 200 and a whole body ({bad} did not)")
    return outcomes


def storm(target, clients=32, under_load=False):
    status(target, clients=clients, requests=1, hang_fraction=1.0, max_tokens=64)
    if not under_load:
        target.check(target.wait_idle(30), "storm: running, waiting and KV blocks back to 0")


def soak(target, seconds=300, clients=32):
    samples = []
    stop = threading.Event()

    def sample():
        while not stop.wait(5):
            samples.append(target.rss_mb())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    status(target, clients=clients, hang_fraction=0.1, seconds=seconds, keep_alive=True)
    stop.set()
    thread.join()
    target.check(target.wait_idle(60), "soak: running, waiting and KV blocks back to 0")
    if len(samples) >= 4:
        warm = samples[len(samples) // 4:]
        print(f"soak: RSS MB after warm-up min {min(warm):.0f} max {max(warm):.0f}", flush=True)
        target.check(max(warm) - min(warm) < 100, "soak: RSS flat after warm-up (< 100 MB spread)")


def fairness(target, prompt_words=2000, max_share=None, max_p99_share=None, max_tokens=16):
    """A short stream while a long prompt prefills: its time to first token and largest gap between
    tokens (one long prompt must not stall the others for a whole long step). `max_share`: the
    longest wait allowed, as a share of the long request's time (a step's share of the prefill is
    one over its chunks, whatever the machine's speed). `max_p99_share`: the same for the p99 of
    the gaps between tokens (the step budget by cost keeps steps deep in the prompt short).
    Returns (p99 gap, the long request's seconds)."""
    long_result = {}

    def long_request():
        status, seconds = target.completion(max_tokens=1, timeout=900, prompt="word " * prompt_words)
        long_result.update(status=status, seconds=seconds)

    thread = threading.Thread(target=long_request)
    thread.start()
    time.sleep(2.0)  # the long prompt is being fed
    connection = http.client.HTTPConnection(HOST, target.port, timeout=900)
    body = {"model": target.model, "prompt": "The capital of France is", "max_tokens": max_tokens, "temperature": 0,
            "stream": True}
    start = time.time()
    connection.request("POST", "/v1/completions", body=json.dumps(body), headers=target.headers())
    response = connection.getresponse()
    arrivals = []
    for line in response:
        if line.startswith(b"data: {"):
            arrivals.append(time.time())
        if line.strip() == b"data: [DONE]":
            break
    connection.close()
    thread.join()
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    ttft = arrivals[0] - start if arrivals else float("inf")
    ordered = sorted(gaps)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0
    print(f"fairness: {prompt_words}-word prompt took {long_result.get('seconds', 0):.1f} s "
          f"({long_result.get('status')}); the short stream's TTFT {ttft:.2f} s, largest gap "
          f"{max(gaps) if gaps else 0:.2f} s, p99 gap {p99:.2f} s, median {ordered[len(ordered) // 2] if ordered else 0:.2f} s, "
          f"{len(arrivals)} chunks in {arrivals[-1] - start:.1f} s", flush=True)
    if max_share is not None:
        longest, prefill = max(gaps + [ttft]), long_result.get("seconds", 0)
        target.check(longest < max_share * prefill, f"fairness: the longest wait, {longest:.2f} s, is under "
                                                    f"{max_share:.0%} of the long request's {prefill:.1f} s")
    if max_p99_share is not None:
        prefill = long_result.get("seconds", 0)
        target.check(p99 < max_p99_share * prefill, f"fairness: the p99 gap between tokens, {p99:.2f} s, is under "
                                                    f"{max_p99_share:.1%} of the long request's {prefill:.1f} s")
    return p99, long_result.get("seconds", 0)


def sigterm(target, clients=16, after=3.0):
    """SIGTERM under load (needs --pid; the server goes away): requests in flight end with 200 and a
    whole body (a stream the drain cuts: finish_reason and [DONE]) or 503; none without a status
    until the listener closes, and the process exits."""
    outcomes, lock = {}, threading.Lock()
    stop = threading.Event()

    def client(number):
        while not stop.is_set():
            outcome, detail = one_request(target, number, stream=number % 2 == 0, max_tokens=32)
            if outcome == "no status" and "ConnectionRefused" in detail:
                return  # the listener is closed: the server is gone
            with lock:
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if outcome == "status 503":
                return

    threads = [threading.Thread(target=client, args=(number,)) for number in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(after)
    os.kill(target.pid, signal.SIGTERM)
    deadline = time.time() + 120
    for thread in threads:
        thread.join(max(0.0, deadline - time.time()))
    stop.set()
    gone = False
    while time.time() < deadline and not gone:
        try:
            os.kill(target.pid, 0)
            time.sleep(0.2)
        except ProcessLookupError:
            gone = True
    bad = sum(count for outcome, count in outcomes.items() if outcome not in ("ok", "status 503"))
    print(f"sigterm: {outcomes}", flush=True)
    target.check(bad == 0, f"sigterm: every request in flight ended with 200 or 503 ({bad} did not)")
    target.check(gone, "sigterm: the server exited")


SCENARIOS = {"fairness": fairness, "sigterm": sigterm, "slowloris": slowloris, "idle": idle, "chunked": chunked, "hangup": hangup, "storm": storm,
             "status": status, "soak": soak}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--key")
    parser.add_argument("--pid", type=int)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=2)
    parser.add_argument("--keep-alive", action="store_true")
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--model", help="the model name to ask for (default: the server's, from /v1/models)")
    parser.add_argument("--under-load", action="store_true",
                        help="another load runs beside: storm checks outcomes only, not that the server went idle")
    parser.add_argument("scenarios", nargs="+", choices=sorted(SCENARIOS))
    args = parser.parse_args()
    raise_descriptor_limit(4096)
    target = Target(args.port, args.key, args.pid, args.model)
    for name in args.scenarios:
        if name == "status":
            status(target, clients=args.clients, requests=args.requests, keep_alive=args.keep_alive)
        elif name == "soak":
            soak(target, seconds=args.seconds, clients=args.clients)
        elif name == "storm":
            storm(target, clients=args.clients, under_load=args.under_load)
        else:
            SCENARIOS[name](target)
    sys.exit(1 if target.failures else 0)


if __name__ == "__main__":
    main()
