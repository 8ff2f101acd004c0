#!/usr/bin/env python3
"""The fidelity audit against bench-fidelity, request by request (issue 28,
item 6): does `serve --fidelity-audit 1` report, for each served request,
the KL that the offline bench measures for the same prompt?

1. `agentkv bench-fidelity --teacher scheme --requests-out R.jsonl` runs the
   task: each scheme's greedy run of each prompt, then an exact re-run
   forced on its tokens (what the audit does), and logs every request.
2. `agentkv serve --fidelity-audit 1` is started with the bench's engine
   settings, and each logged run is replayed through /v1/completions: the
   documents cached alone, then the prompt under the scheme (greedy,
   `ignore_eos`, a `cache_salt` of its own, as the bench's namespace).
3. After each request the script waits for its audit and reads that
   request's KL from /metrics: the change of the scheme's
   `agentkv_fidelity_audit_kl_sum`, exact as printed (shortest round-trip),
   and the bucket whose count changed.

Prints one Markdown row per scheme: requests, served tokens equal to the
bench's, audit KL in the bench KL's bucket, the largest |audit - bench|,
and both means. Exits 1 when a served token or a bucket differs.

Example (50 prompts x 4 schemes = 200 audited requests):
  scripts/audit_vs_bench.py --task retrieval --prompts 50 --gen 16 --out /tmp/audit
"""
import argparse
import bisect
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from server_util import Server, metric  # noqa: E402

# fidelity_audit_kl_buckets() in src/server/fidelity_audit.cpp.
KL_BUCKETS = [1e-9, 1e-6, 1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3]


def bucket(x):
    """Index of the first bucket whose upper bound holds x (Prometheus: le)."""
    return bisect.bisect_left(KL_BUCKETS, x)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--bin", default=str(ROOT / "build" / "agentkv"), help="agentkv binary")
    p.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--task", default="retrieval", help="a bench-fidelity task whose cache requests are plain prompts")
    p.add_argument("--schemes", default="naive,epic,cacheblend,sparsex", help="bench-fidelity --schemes")
    p.add_argument("--prompts", type=int, default=50, help="prompts per scheme")
    p.add_argument("--gen", type=int, default=16, help="generated tokens: bench --gen and --fidelity-audit-tokens")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="/tmp/audit_vs_bench", help="folder for the bench's JSON and request log")
    p.add_argument("--timeout", type=float, default=300, help="seconds to wait for one audit")
    return p.parse_args(argv)


def run_bench(a, out):
    cmd = [a.bin, "bench-fidelity", "--model", a.model, "--task", a.task, "--schemes", a.schemes, "--prompts",
           str(a.prompts), "--gen", str(a.gen), "--threads", str(a.threads), "--seed", str(a.seed), "--teacher",
           "scheme", "--json-out", str(out / "bench.json"), "--requests-out", str(out / "requests.jsonl")]
    print("[audit-vs-bench] " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]


def scheme_series(m, name, scheme, **labels):
    """Sum of a metric over every series of one scheme (any model, tenant)."""
    total = 0.0
    for (n, lab), v in m.items():
        d = dict(lab)
        if n == name and d.get("scheme") == scheme and all(d.get(k) == v2 for k, v2 in labels.items()):
            total += v
    return total


def audits_done(m):
    return sum(metric(m, "agentkv_fidelity_audit_requests_total", result=r) for r in ("audited", "dropped", "failed"))


def post(server, body):
    status, data = server.post_json("/v1/completions", body, timeout=600)
    if status != 200:
        raise SystemExit(f"audit-vs-bench: HTTP {status}: {data[:400]!r}")
    return json.loads(data)


def replay(server, r, salt, a, before):
    """Sends one logged run; returns (served tokens, audit KL, audit bucket)."""
    for c in r["cache_prompts"]:
        post(server, {"prompt": c, "max_tokens": 1, "temperature": 0, "cache_salt": salt, "kv_sharing": "none"})
    out = post(server, {"prompt": r["prompt"], "max_tokens": a.gen, "temperature": 0, "ignore_eos": True,
                        "cache_salt": salt, "kv_sharing": r["kv_sharing"], "return_token_ids": True})
    deadline = time.monotonic() + a.timeout
    while True:
        m = server.metrics()
        if audits_done(m) > audits_done(before):
            break
        if time.monotonic() > deadline:
            raise SystemExit("audit-vs-bench: no audit within --timeout s")
        time.sleep(0.05)
    if metric(m, "agentkv_fidelity_audit_requests_total", result="audited") <= \
            metric(before, "agentkv_fidelity_audit_requests_total", result="audited"):
        raise SystemExit("audit-vs-bench: the audit was dropped or failed")
    scheme = r["kv_sharing"]["scheme"]
    kl = scheme_series(m, "agentkv_fidelity_audit_kl_sum", scheme) - \
        scheme_series(before, "agentkv_fidelity_audit_kl_sum", scheme)
    # Cumulative buckets: the first bound whose count grew holds this KL.
    moved = next((i for i in range(len(KL_BUCKETS) + 1)
                  if bucket_count(m, scheme, i) > bucket_count(before, scheme, i)), None)
    return out["choices"][0].get("token_ids"), kl, moved, m


def bucket_count(m, scheme, i):
    """Count of the scheme's KL histogram at bound i (len(KL_BUCKETS): +Inf)."""
    total = 0.0
    for (n, lab), v in m.items():
        d = dict(lab)
        if n != "agentkv_fidelity_audit_kl_bucket" or d.get("scheme") != scheme:
            continue
        le = d.get("le")
        if (le == "+Inf") if i == len(KL_BUCKETS) else (le not in (None, "+Inf") and float(le) == KL_BUCKETS[i]):
            total += v
    return total


def main(argv=None):
    a = parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = run_bench(a, out)
    for r in runs:
        if any(r["cache_forced"]) or r["cache_under_scheme"]:
            raise SystemExit(f"audit-vs-bench: task {a.task}'s cache requests are forced decodes or run under "
                             f"{r['label']}; the completions API replays neither (use retrieval, passkey or a "
                             "RULER task, and a segment-reuse scheme other than relay)")
    # The bench runs the schemes' built-in defaults: so does the server.
    server = Server(a.bin, a.model, ["--no-scheme-defaults", "--fidelity-audit", "1", "--fidelity-audit-tokens", str(a.gen),
                                     "--max-batch-tokens", "16384", "--kv-cache-mb", "1024"], threads=a.threads)
    rows = {}
    try:
        m = server.metrics()
        for i, r in enumerate(runs):
            salt = f"audit-{r['prompt_index']}-{r['label']}"
            tokens, kl, moved, m = replay(server, r, salt, a, m)
            row = rows.setdefault(r["label"], {"n": 0, "tokens": 0, "bucket": 0, "diff": 0.0, "bench": 0.0,
                                               "audit": 0.0})
            row["n"] += 1
            row["tokens"] += tokens == r["tokens"]
            row["bucket"] += moved == bucket(r["kl"])
            row["diff"] = max(row["diff"], abs(kl - r["kl"]))
            row["bench"] += r["kl"]
            row["audit"] += kl
            print(f"[audit-vs-bench] {i + 1}/{len(runs)} {r['label']} prompt {r['prompt_index'] + 1}: bench KL "
                  f"{r['kl']:.6g}, audit {kl:.6g}, tokens {'same' if tokens == r['tokens'] else 'DIFFER'}",
                  file=sys.stderr, flush=True)
    finally:
        server.stop()
    print(f"\n{a.task}: {a.prompts} prompts, {a.gen} audited positions, {a.threads} threads\n")
    print("| scheme | requests | served tokens = bench's | same KL bucket | max abs(audit - bench) KL | "
          "bench mean KL | audit mean KL |")
    print("|---|---|---|---|---|---|---|")
    ok = True
    for label, row in rows.items():
        n = row["n"]
        ok = ok and row["tokens"] == n and row["bucket"] == n
        print(f"| {label} | {n} | {row['tokens']} | {row['bucket']} | {row['diff']:.2e} | {row['bench'] / n:.6f} | "
              f"{row['audit'] / n:.6f} |")
    (out / "rows.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
