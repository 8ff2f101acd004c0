#!/usr/bin/env python3
"""agentkv serve against llama-server on the same GGUF file, threads and slots.

Two measurements, each a Markdown table:

  load    A multi-turn agent load: C clients, each a conversation of T turns
          under one shared system prompt, streamed chat completions of a fixed
          length (ignore_eos), each turn sending the whole conversation so far.
          Servers alternate run by run (--repeats pairs); requests/s is
          C*T / wall time, with median time to first token and median
          end-to-end latency per request.
  memory  Peak RSS (VmHWM) of each server after one prompt that fills most
          of an N-token context (--ctx), one slot, f16 KV in both.

Nothing here needs a package beyond the standard library.
Setup: scripts/setup.sh, then scripts/setup_bench.sh (builds llama-server).
  python3 scripts/bench_vs_llama_server.py load --clients 16 --turns 4 --repeats 3
  python3 scripts/bench_vs_llama_server.py memory --ctx 8192
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LLAMA_BIN = os.path.join(os.environ.get("AGENTKV_LLAMA_DIR", os.path.expanduser("~/.cache/agentkv/llama.cpp")),
                         "build", "bin")
WORDS = ("agent plan tool call result memory context retrieve answer reflect check file line value error test "
         "build report step goal state query table index cache block token layer model adapter share reuse").split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process on a free port; ready when /health answers 200."""

    def __init__(self, name, cmd, port):
        self.name, self.port = name, port
        self.log = open(os.path.join("/tmp", f"bench_vs_llama_server.{name}.log"), "w")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=ROOT)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"{name} exited at start: see {self.log.name}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        sys.exit(f"{name} not healthy after 180 s: see {self.log.name}")

    def peak_rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def start(name, a, slots, ctx_tokens):
    port = free_port()
    if name == "agentkv":
        # The pool holds every slot's context in f16 (bytes per token from the
        # model: 30 layers x K,V x 192 x 2 bytes = 22.5 KiB), + 10% for the
        # LR and owner bookkeeping that shares the budget.
        kv_mb = int(ctx_tokens * 23040 * 1.1 / (1 << 20)) + 8
        cmd = [a.agentkv, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", str(port), "-t", str(a.threads),
               "--max-running", str(slots), "--kv-cache-mb", str(kv_mb), "--kv-dtype", "f16",
               "--max-model-len", str(ctx_tokens // slots), "--served-model-name", "m"]
    else:
        cmd = [os.path.join(a.llama_bin, "llama-server"), "-m", a.model, "--host", "127.0.0.1", "--port", str(port),
               "-t", str(a.threads), "-np", str(slots), "-c", str(ctx_tokens), "-ctk", "f16", "-ctv", "f16",
               "--no-webui", "-a", "m"]
    return Server(name, cmd, port)


def chat(port, messages, max_tokens, timeout=600):
    """One streamed chat completion: (ttft_s, total_s, text)."""
    body = json.dumps({"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "ignore_eos": True})
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    ttft, text, done = None, [], False
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            break
        ev = json.loads(data)
        for ch in ev.get("choices", []):
            piece = (ch.get("delta") or {}).get("content")
            if piece:
                if ttft is None:
                    ttft = time.monotonic() - t0
                text.append(piece)
    c.close()
    if not done:
        raise RuntimeError("stream ended without [DONE]")
    return ttft if ttft is not None else float("nan"), time.monotonic() - t0, "".join(text)


def sentence(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def run_load(port, a, seed):
    rng = random.Random(seed)
    system = " ".join(sentence(rng, 12) for _ in range(a.system_sentences))
    users = [[sentence(random.Random(seed * 1000 + c * 10 + t), a.user_words) for t in range(a.turns)]
             for c in range(a.clients)]
    ttfts, lats, errors = [], [], []
    lock = threading.Lock()

    def client(ci):
        msgs = [{"role": "system", "content": system}]
        for t in range(a.turns):
            msgs.append({"role": "user", "content": users[ci][t]})
            try:
                ttft, total, text = chat(port, msgs, a.max_tokens)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(str(e))
                return
            msgs.append({"role": "assistant", "content": text})
            with lock:
                ttfts.append(ttft)
                lats.append(total)

    t0 = time.monotonic()
    th = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    if errors:
        sys.exit(f"{len(errors)} failed requests, first: {errors[0]}")
    return {"rps": len(lats) / wall, "ttft": statistics.median(ttfts), "lat": statistics.median(lats), "wall": wall}


def cmd_load(a):
    ctx = a.clients * a.slot_ctx
    res = {"agentkv": [], "llama-server": []}
    for r in range(a.repeats):
        order = ["agentkv", "llama-server"] if r % 2 == 0 else ["llama-server", "agentkv"]
        for name in order:
            print(f"\r[bench_vs_llama_server] repeat {r + 1}/{a.repeats}: {name}      ", end="", file=sys.stderr,
                  flush=True)
            s = start(name, a, a.clients, ctx)
            try:
                run_load(s.port, a, seed=a.seed + 7919 * (r + 1))  # warm-up: the same shape, other text
                res[name].append(run_load(s.port, a, seed=a.seed + r))
            finally:
                s.stop()
    print(file=sys.stderr)
    print(f"{a.clients} clients x {a.turns} turns, system prompt of {a.system_sentences} sentences, "
          f"{a.max_tokens} tokens per answer (streamed, ignore_eos), {a.threads} threads, {a.clients} slots, "
          f"f16 KV; {a.repeats} runs each, alternated; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print("| server | requests/s (median) | runs | TTFT median (s) | latency median (s) |")
    print("|---|---|---|---|---|")
    med = {}
    for name, runs in res.items():
        med[name] = statistics.median(x["rps"] for x in runs)
        each = ", ".join(f"{x['rps']:.2f}" for x in runs)
        print(f"| {name} | {med[name]:.2f} | {each} | "
              f"{statistics.median(x['ttft'] for x in runs):.3f} | {statistics.median(x['lat'] for x in runs):.3f} |")
    print(f"\nagentkv / llama-server: {med['agentkv'] / med['llama-server']:.2f}x requests/s")


def cmd_memory(a):
    rng = random.Random(a.seed)
    # ~0.9 of the context in prompt tokens (about 1.3 tokens per word here).
    prompt = " ".join(rng.choice(WORDS) for _ in range(int(a.ctx * 0.9 / 1.3)))
    print(f"one request of ~{int(a.ctx * 0.9)} prompt tokens + 16 generated, context {a.ctx}, one slot, f16 KV, "
          f"{a.threads} threads; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print("| server | peak RSS (MiB) |")
    print("|---|---|")
    out = {}
    for name in ("agentkv", "llama-server"):
        s = start(name, a, 1, a.ctx)
        try:
            chat(s.port, [{"role": "user", "content": prompt}], 16)
            out[name] = s.peak_rss_mib()
        finally:
            s.stop()
        print(f"| {name} | {out[name]:.0f} |")
    print(f"\nagentkv / llama-server: {out['agentkv'] / out['llama-server']:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["load", "memory"])
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--agentkv", default=os.path.join(ROOT, "build", "agentkv"))
    ap.add_argument("--llama-bin", default=LLAMA_BIN, help="directory of llama-server (scripts/setup_bench.sh)")
    ap.add_argument("--clients", type=int, default=16, help="load: concurrent conversations = slots")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--system-sentences", type=int, default=20, help="load: shared system prompt length")
    ap.add_argument("--user-words", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--slot-ctx", type=int, default=2048, help="load: context per slot")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ctx", type=int, default=8192, help="memory: context size")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.llama_bin, "llama-server")):
        sys.exit(f"no llama-server in {a.llama_bin}: run scripts/setup_bench.sh")
    cmd_load(a) if a.what == "load" else cmd_memory(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
