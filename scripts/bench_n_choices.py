#!/usr/bin/env python3
"""n > 1 on one prefill: one request with n choices against n requests for
the same prompt that cannot share (distinct cache_salt), interleaved A/B on
one `agentkv serve`. Each trial uses a fresh prompt, so neither side finds
it cached. Prints a Markdown table: wall time (median), prompt tokens the
model computed (usage.prompt_tokens_details.prefilled_tokens, or the sum of
prompt_tokens - cached_tokens), and prefix-cache hit tokens (/metrics).

Example:
  scripts/bench_n_choices.py --n 4 --prompt-items 80 --trials 5
"""
import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
import server_util  # noqa: E402


def prompt(items):
    tag = uuid.uuid4().hex[:10]
    body = " ".join(f"Entry {i}: sensor {tag} read {i * 37 % 101} units at step {i}." for i in range(items))
    return f"Log {tag}. {body} Summary:"


def post(server, body):
    status, _, data = server.request("POST", "/v1/completions", body, timeout=600)
    if status != 200:
        raise RuntimeError(f"{status}: {data[:300]!r}")
    return json.loads(data)


def hits(server):
    return server_util.metric(server.metrics(), "agentkv_prefix_hit_tokens_total")


def shared(server, args, text):
    body = {"prompt": text, "n": args.n, "seed": 1, "temperature": 1.0, "max_tokens": args.max_tokens,
            "ignore_eos": True}
    r = post(server, body)
    u = r["usage"]
    return u["prompt_tokens_details"]["prefilled_tokens"], u["prompt_tokens"]


def separate(server, args, text):
    out = [None] * args.n

    def one(j):
        out[j] = post(server, {"prompt": text, "seed": 1 + j, "temperature": 1.0, "max_tokens": args.max_tokens,
                               "ignore_eos": True, "cache_salt": f"sep-{j}"})

    threads = [threading.Thread(target=one, args=(j,)) for j in range(args.n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    prefilled = sum(r["usage"]["prompt_tokens"] - r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in out)
    return prefilled, out[0]["usage"]["prompt_tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(ROOT / "build" / "agentkv"))
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--prompt-items", type=int, default=80)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--trials", type=int, default=5)
    args = ap.parse_args()

    server = server_util.Server(args.binary, args.model, ["--kv-cache-mb", 128, "--max-model-len", 4096],
                                threads=args.threads)
    rows = {"shared": [], "separate": []}
    try:
        post(server, {"prompt": "warm up", "max_tokens": 2})
        for trial in range(args.trials):
            order = ["shared", "separate"] if trial % 2 == 0 else ["separate", "shared"]
            for kind in order:
                text = prompt(args.prompt_items)
                h0 = hits(server)
                t0 = time.perf_counter()
                prefilled, n_prompt = (shared if kind == "shared" else separate)(server, args, text)
                dt = time.perf_counter() - t0
                rows[kind].append((dt, prefilled, n_prompt, hits(server) - h0))
    finally:
        server.stop(timeout=60)

    print(f"n = {args.n}, max_tokens = {args.max_tokens}, {args.trials} trials interleaved, "
          f"--threads {args.threads}, block size 16\n")
    print("| how | prompt tokens | wall s (median) | prompt tokens computed | prefix-hit tokens |")
    print("| --- | ---: | ---: | ---: | ---: |")
    med = {}
    for kind, label in (("shared", f"one request, n={args.n}"), ("separate", f"{args.n} requests, no sharing")):
        r = rows[kind]
        med[kind] = statistics.median(x[0] for x in r)
        print(f"| {label} | {r[0][2]} | {med[kind]:.2f} | {statistics.median(x[1] for x in r):.0f} | "
              f"{statistics.median(x[3] for x in r):.0f} |")
    print(f"\nratio separate / shared wall time: {med['separate'] / med['shared']:.2f}")


if __name__ == "__main__":
    main()
