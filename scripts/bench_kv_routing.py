#!/usr/bin/env python3
"""Does a prefix-aware router fed only agentkv's KV cache events send an
aLoRA adapter's request to the replica that holds the base model's prefix?

N replicas of `agentkv serve --kv-sharing alora` (one aLoRA adapter, made by
`agentkv synth-adapter`) publish their events to one subscriber, each under
its own topic. For each of --docs documents, the base model reads it on a
replica picked at random; then the adapter's request for the same document
plus its invocation is routed by tools/kv_router/prefix_picker.py, which
reads nothing but the events. Counted: how often the picker chose the
replica holding the document, and the prompt tokens the adapter's request
found cached there. Run with the aliases (the default) and without
(--no-kv-events-aliases), on the same documents and the same random draws.

    .venv/bin/python scripts/bench_kv_routing.py --replicas 3 --docs 40
"""
import argparse
import json
import math
import random
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import zmq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.insert(0, str(ROOT / "tools" / "kv_router"))
from prefix_picker import PrefixPicker  # noqa: E402
from server_util import Server  # noqa: E402

INVOCATION = " Answer:"
WORDS = ("agent tool cache block prefix router replica adapter model token query answer document "
         "river stone cloud paper light signal number market garden engine").split()


def wilson(k, n, z=1.96):
    if n == 0:
        return (0.0, 0.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (c - h, c + h)


class Subscriber:
    """One bound SUB socket that every replica connects to; reads all the time."""

    def __init__(self, picker):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.port = self.sub.bind_to_random_port("tcp://127.0.0.1")
        self.picker, self.last = picker, time.monotonic()
        self.lock, self.stop = threading.Lock(), False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop:
            if self.sub.poll(20):
                topic, _seq, payload = self.sub.recv_multipart()
                with self.lock:
                    self.picker.apply(topic.decode(), payload)
                    self.last = time.monotonic()

    def wait_for(self, replica, tokens, lora_name, n_blocks, timeout_s=30):
        """Until the events have shown n_blocks leading blocks of tokens on replica
        (events arrive after the answer; under load, well after)."""
        t = time.monotonic()
        while time.monotonic() - t < timeout_s:
            with self.lock:
                if self.picker.score(replica, tokens, lora_name) >= n_blocks:
                    return
            time.sleep(0.02)
        raise RuntimeError(f"{replica}: the events did not show the document in {timeout_s} s")

    def close(self):
        self.stop = True
        self.thread.join(5)
        self.sub.close(0)
        self.ctx.term()


def post(server, path, body):
    status, data = server.post_json(path, body)
    if status != 200:
        raise RuntimeError(f"{path} answered {status}: {data[:300]!r}")
    return json.loads(data)


def run_mode(args, adapter, aliases, docs, draws):
    picker = PrefixPicker(args.block_size)
    sub = Subscriber(picker)
    flags = ["--block-size", args.block_size, "--kv-cache-mb", args.kv_cache_mb, "--lr-cache-rank", 0,
             "--kv-sharing", "alora", "--adapter", f"inv={adapter}:alora", "--max-model-len", 2048]
    if not aliases:
        flags.append("--no-kv-events-aliases")
    names = [f"kv@r{i}" for i in range(args.replicas)]
    servers = [Server(args.agentkv, args.model, [*flags, "--kv-events", f"tcp://127.0.0.1:{sub.port}",
                                                 "--kv-events-topic", n], threads=1) for n in names]
    by_name = dict(zip(names, servers))
    hits, cached = 0, []
    try:
        for i, (doc, draw) in enumerate(zip(docs, draws)):
            holder = names[draw]
            base = post(by_name[holder], "/tokenize", {"prompt": doc})["tokens"]
            post(by_name[holder], "/v1/completions", {"prompt": base, "max_tokens": 1, "temperature": 0})
            toks = post(by_name[holder], "/tokenize", {"prompt": doc + INVOCATION})["tokens"]
            # The base's blocks of the document, as the holder announces them
            # (the block of the last token is not cached).
            sub.wait_for(holder, base, None, (len(base) - 1) // args.block_size)
            with sub.lock:
                chosen, score = picker.pick(names, toks, "inv", random.Random(args.seed * 1000 + i))
            r = post(by_name[chosen], "/v1/completions",
                     {"model": "inv", "prompt": toks, "max_tokens": 1, "temperature": 0})
            hits += chosen == holder
            cached.append(r["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0))
            if (i + 1) % 10 == 0:
                print(f"  [{'aliases' if aliases else 'no aliases'}] {i + 1}/{len(docs)} routed, "
                      f"{hits} to the holder", file=sys.stderr, flush=True)
    finally:
        for s in servers:
            s.stop()
        sub.close()
    return hits, cached


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agentkv", default=str(ROOT / "build" / "agentkv"))
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--docs", type=int, default=40)
    ap.add_argument("--doc-words", type=int, default=120)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--kv-cache-mb", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    docs = [f"Document {i}: " + " ".join(rng.choice(WORDS) for _ in range(args.doc_words)) for i in range(args.docs)]
    draws = [rng.randrange(args.replicas) for _ in docs]
    with tempfile.TemporaryDirectory() as tmp:
        adapter = Path(tmp) / "inv"
        import subprocess
        subprocess.run([args.agentkv, "synth-adapter", "--model", args.model, "--out", str(adapter), "--rank", "8",
                        "--seed", "3", "--alora-invocation", INVOCATION], check=True, capture_output=True)
        rows = []
        for aliases in (True, False):
            hits, cached = run_mode(args, adapter, aliases, docs, draws)
            lo, hi = wilson(hits, len(docs))
            rows.append((aliases, hits, len(docs), lo, hi, sum(cached) / len(cached)))
    print(f"\n{args.replicas} replicas, {args.docs} documents of {args.doc_words} words, block {args.block_size}, "
          f"seed {args.seed}; chance is {100 / args.replicas:.0f}%\n")
    print("| events | adapter request sent to the base prefix's replica | 95% CI (Wilson) | mean cached prompt tokens |")
    print("|---|---:|---|---:|")
    for aliases, hits, n, lo, hi, mc in rows:
        print(f"| {'with aliases' if aliases else 'without aliases'} | {hits}/{n} ({100 * hits / n:.0f}%) | "
              f"{100 * lo:.0f}-{100 * hi:.0f}% | {mc:.1f} |")


if __name__ == "__main__":
    main()
