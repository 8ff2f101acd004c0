#!/usr/bin/env python3
"""What constrained decoding costs: decode tokens/s of `agentkv serve` with and
without a grammar, on the same prompts, interleaved request by request.

Modes (each a streamed chat completion at temperature 0; the prompt is sent
once beforehand so that every timed request hits the prefix cache and the
time after the first token is decode):
  free      no constraint
  anytext   guided_regex "[\\s\\S]*": the same tokens as free, with a mask
            filled and applied at every step (the mask's pure cost)
  schema    response_format json_schema (a person record): a different
            output, so only tokens/s compares, not text
For each mode: decode tokens/s = (tokens - 1) / (last token - first token),
median over --rounds rounds, and the ratio to free with the spread of the
per-round ratios. Also the grammar's first-use compile time and cache hits,
from /metrics. A Markdown table on stdout.
  python3 scripts/bench_constrained.py --rounds 5 --tokens 96
"""
import argparse
import http.client
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["Write a long story about a dragon who learns to bake bread.",
           "Explain in detail how a steam engine works, step by step.",
           "Describe a journey across the ocean on a small sailing boat."]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "city": {"type": "string"}, "hobbies": {"type": "array",
                                                                                    "items": {"type": "string"}}},
          "required": ["name", "age", "city", "hobbies"]}


def start(args):
    cmd = [str(ROOT / "build/agentkv"), "serve", "--host", "127.0.0.1", "--port", "0", "--threads", str(args.threads)]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=ROOT)
    for raw in p.stderr:
        m = re.search(rb"listening on http://([^\s:/]+):(\d+)", raw)
        if m:
            return p, m.group(1).decode(), int(m.group(2))
    raise SystemExit("agentkv serve did not start")


def stream(host, port, body):
    conn = http.client.HTTPConnection(host, port, timeout=600)
    conn.request("POST", "/v1/chat/completions", json.dumps({**body, "stream": True}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    times = []
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[5:])
        for c in chunk.get("choices", []):
            if c.get("delta", {}).get("content"):
                times.append(time.perf_counter())
    conn.close()
    return times


def body(mode, prompt, tokens):
    b = {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": tokens}
    if mode == "anytext":
        b["guided_regex"] = "[\\s\\S]*"
    elif mode == "schema":
        b["response_format"] = {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}
    return b


def metric(host, port, name):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    proc, host, port = start(args)
    modes = ["free", "anytext", "schema"]
    try:
        for prompt in PROMPTS:  # warm the prefix cache and compile the grammars once
            for mode in modes:
                stream(host, port, body(mode, prompt, 2))
        compile_s = metric(host, port, "agentkv_grammar_compile_seconds_total")
        compiles = metric(host, port, "agentkv_grammar_compilations_total")
        rates = {m: [] for m in modes}
        for r in range(args.rounds):
            for prompt in PROMPTS:
                for mode in (modes if r % 2 == 0 else modes[::-1]):
                    t = stream(host, port, body(mode, prompt, args.tokens))
                    if len(t) > 8:
                        rates[mode].append((len(t) - 1) / (t[-1] - t[0]))
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
        hits = metric(host, port, "agentkv_grammar_cache_hits_total")
    finally:
        proc.terminate()
        proc.wait()
    print(f"| mode | decode tok/s (median) | vs free (median of paired ratios, min-max) |")
    print("|---|---:|---:|")
    for m in modes:
        ratios = [a / b for a, b in zip(rates[m], rates["free"])]
        print(f"| {m} | {statistics.median(rates[m]):.1f} | {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f}) |")
    print(f"\ngrammar compilations: {compiles:.0f}, {compile_s * 1000 / max(compiles, 1):.1f} ms each on first use; "
          f"cache hits after: {hits:.0f}")


if __name__ == "__main__":
    main()
