"""Starts `vt serve` for the end-to-end tests: on two threads, on a free port, its stderr drained."""
import re
import subprocess
import sys
import threading
import time


def start_server(vt, model, *args):
    """`vt serve --model MODEL --port 0 ARGS...`; returns (process, port) once it listens (exits the
    test when it does not within two minutes)."""
    process = subprocess.Popen([vt, "--threads", "2", "serve", "--model", model, "--port", "0", *args],
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
