#!/usr/bin/env python3
"""How `agentkv serve` answers while hostile clients hold connections open.

For each flood size N, opens N/2 connections that never send a byte and N/2
that stop in the middle of their headers, then times GET /health and a short
completion (2 tokens) from another client, and reads the server's own count
of open connections from /metrics. Prints a Markdown table.

    .venv/bin/python scripts/idle_flood.py                    # N = 0, 300, 1000, 2000
    .venv/bin/python scripts/idle_flood.py --sizes 1000 --tries 20
    .venv/bin/python scripts/idle_flood.py --serve-args "--max-connections 500"

Loopback only; every socket is closed before the next size."""
import argparse
import json
import re
import resource
import shlex
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HALF_OPEN = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n"


def start_server(binary, model, extra):
    cmd = [binary, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0", "--threads", "2",
           "--max-model-len", "256", "--kv-cache-mb", "16", *extra]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    port = []
    ready = threading.Event()

    def drain():
        for raw in proc.stderr:
            m = re.search(rb"listening on http://[^:]+:(\d+)", raw)
            if m and not port:
                port.append(int(m.group(1)))
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    if not ready.wait(120) or not port:
        proc.kill()
        sys.exit(f"server did not start: {' '.join(cmd)}")
    return proc, port[0]


def request(port, method, path, body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
    except OSError:
        status = None
    return status, time.monotonic() - t0


def open_connections(port, n):
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        if i % 2:
            s.sendall(HALF_OPEN)
        socks.append(s)
    return socks


def open_gauge(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        m = re.search(rb"^agentkv_http_connections_open (\S+)$", r.read(), re.M)
    return int(float(m.group(1))) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "build" / "agentkv"))
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--sizes", default="0,300,1000,2000", help="flood sizes, comma-separated")
    ap.add_argument("--tries", type=int, default=10, help="timed requests of each kind per size")
    ap.add_argument("--serve-args", default="", help="extra `serve` flags")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, max(sizes) + 256)), hard))

    proc, port = start_server(a.bin, a.model, shlex.split(a.serve_args))
    completion = {"prompt": "Hello", "max_tokens": 2, "temperature": 0}
    request(port, "POST", "/v1/completions", completion)  # warm up
    print("| idle + half-open | held by server | /health p50 | /health max | completion p50 | completion max | "
          "non-200 |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    try:
        for n in sizes:
            socks = open_connections(port, n)
            try:
                time.sleep(0.5)
                held = open_gauge(port)
                health, comp, bad = [], [], 0
                for _ in range(a.tries):
                    st, dt = request(port, "GET", "/health")
                    health.append(dt)
                    bad += st != 200
                    st, dt = request(port, "POST", "/v1/completions", completion)
                    comp.append(dt)
                    bad += st != 200
            finally:
                for s in socks:
                    s.close()
            ms = lambda xs, f: f"{1000 * f(xs):.1f} ms"  # noqa: E731
            print(f"| {n} | {held} | {ms(health, statistics.median)} | {ms(health, max)} | "
                  f"{ms(comp, statistics.median)} | {ms(comp, max)} | {bad} |")
            time.sleep(1)
    finally:
        proc.terminate()
        proc.wait(60)


if __name__ == "__main__":
    main()
