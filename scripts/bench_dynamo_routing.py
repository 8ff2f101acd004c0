#!/usr/bin/env python3
"""Multi-agent load through NVIDIA Dynamo's KV router against its
round-robin mode and against nginx with session affinity: prefix hit rate,
latency and requests/s over agentkv replicas on one host.

--agents agents each run --turns turns on their own growing trajectory: a
system text every agent shares, the agent's own document, then each turn's
user line and the answer before it. Agents use the base model and
--adapters adapters in turn (LoRA names through Dynamo). --clients threads
send the turns, each agent's in order. Modes run in rotated rounds in one
command, each on a fresh cluster (cold caches):
  kv           scripts/dynamo_cluster.sh --router-mode kv
  round-robin  scripts/dynamo_cluster.sh --router-mode round-robin
  nginx        scripts/cluster.sh (hash on X-Session-ID = the agent)
Counted per request from the replica's own usage: the hit rate is cached
prompt tokens / prompt tokens. Latency is the whole request (max_tokens
tokens); TTFT is the frontend's nvext.timing.ttft_ms (Dynamo modes only).
On two cores this measures routing and cache, not scaling.

    .venv/bin/python scripts/bench_dynamo_routing.py --rounds 2
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("agent tool cache block prefix router replica adapter model token query answer document river stone "
         "cloud paper light signal number market garden engine").split()


def run(cmd, env):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed:\n{r.stderr}")


def start(mode, a, env, root):
    flags = ["--threads", "1", "--kv-cache-mb", str(a.kv_cache_mb)]
    for i in range(a.adapters):
        flags += ["--adapter", f"ad{i}={root / f'ad{i}'}"]
    if mode == "nginx":
        run([ROOT / "scripts" / "cluster.sh", "start", "--replicas", str(a.replicas), "--port", str(a.port), "--",
             "--model", a.model, *flags], env)
    else:
        run([ROOT / "scripts" / "dynamo_cluster.sh", "start", "--model", a.model, "--replicas", str(a.replicas),
             "--port", str(a.port), "--router-mode", mode, "--", *flags], env)


def stop(mode, env):
    script = "cluster.sh" if mode == "nginx" else "dynamo_cluster.sh"
    subprocess.run([ROOT / "scripts" / script, "stop"], env=env, capture_output=True, timeout=120)


def post(port, body, headers):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json", **headers})
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"null")
    finally:
        c.close()


def workload(a):
    system = " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(90))
    agents = []
    for k in range(a.agents):
        doc = " ".join(WORDS[(k * 13 + i * 5) % len(WORDS)] for i in range(160))
        agents.append({"id": k, "model": None if k % (a.adapters + 1) == 0 else f"ad{k % (a.adapters + 1) - 1}",
                       "text": f"{system}\nAgent {k} reads:\n{doc}\n"})
    return agents


def one_round(mode, a, model_name):
    agents = workload(a)
    rows, lock = [], threading.Lock()

    def client(mine):
        for turn in range(a.turns):
            for ag in mine:
                ag["text"] += f"Turn {turn}: what next for agent {ag['id']}?\n"
                body = {"prompt": ag["text"], "max_tokens": a.max_tokens, "temperature": 0}
                if mode != "nginx":
                    body["model"] = ag["model"] or model_name
                    body["nvext"] = {"extra_fields": ["timing"]}
                elif ag["model"]:
                    body["model"] = ag["model"]
                t0 = time.perf_counter()
                status, d = post(a.port, body, {"X-Session-ID": f"agent-{ag['id']}"})
                dt = time.perf_counter() - t0
                if status != 200:
                    raise SystemExit(f"{mode}: {status} {d}")
                ag["text"] += d["choices"][0]["text"] + "\n"
                u = d["usage"]
                ttft = ((d.get("nvext") or {}).get("timing") or {}).get("ttft_ms")
                with lock:
                    rows.append((u["prompt_tokens"], (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0,
                                 dt, ttft))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(agents[i::a.clients],)) for i in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    prompt = sum(r[0] for r in rows)
    cached = sum(r[1] for r in rows)
    lat = sorted(r[2] for r in rows)
    ttft = sorted(r[3] for r in rows if r[3] is not None)
    q = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")  # noqa: E731
    return {"mode": mode, "requests": len(rows), "hit_rate": cached / prompt, "lat_p50": q(lat, 0.5),
            "lat_p95": q(lat, 0.95), "ttft_p50": q(ttft, 0.5) / 1e3, "ttft_p95": q(ttft, 0.95) / 1e3,
            "req_s": len(rows) / wall}


def plot(runs, path):
    """Hit rate and TTFT p50 per mode, one panel pair per run; runs is
    [(title, rows)]. Each round is a point, the bar its median."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(runs), 2, figsize=(8, 2.8 * len(runs)), squeeze=False)
    for (title, rows), (ax_hit, ax_ttft) in zip(runs, axes):
        modes = list(dict.fromkeys(r["mode"] for r in rows))
        for ax, key, label in ((ax_hit, "hit_rate", "prefix hit rate"), (ax_ttft, "ttft_p50", "TTFT p50 (s)")):
            for i, m in enumerate(modes):
                ys = [r[key] for r in rows if r["mode"] == m and r.get(key) == r.get(key)]  # drop NaN
                if not ys:
                    continue
                ax.bar(i, statistics.median(ys), color="#9ab")
                ax.plot([i] * len(ys), ys, "k.")
            ax.set_xticks(range(len(modes)))
            ax.set_xticklabels(modes, fontsize=8)
            ax.set_ylabel(label, fontsize=8)
            ax.set_title(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--modes", default="kv,round-robin,nginx")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--agents", type=int, default=16)
    ap.add_argument("--adapters", type=int, default=2, help="agents cycle over the base and this many adapters")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--kv-cache-mb", type=int, default=64)
    ap.add_argument("--port", type=int, default=18600)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--plot", help="draw hit rate and TTFT per mode into this PNG (needs matplotlib)")
    ap.add_argument("--replot", nargs="+", metavar="TITLE=JSON",
                    help="draw --plot from earlier --json outputs instead of running")
    a = ap.parse_args()
    if a.replot:
        plot([(t, json.loads(Path(f).read_text())) for t, f in (x.split("=", 1) for x in a.replot)], a.plot)
        return
    root = Path(tempfile.mkdtemp(prefix="bench-dynamo-"))
    env = dict(os.environ, AGENTKV_DYNAMO_DIR=str(root / "dynamo"), AGENTKV_CLUSTER_DIR=str(root / "nginx"))
    binary = os.environ.get("AGENTKV_BIN", str(ROOT / "build" / "agentkv"))
    for i in range(a.adapters):
        run([binary, "synth-adapter", "--model", a.model, "--out", root / f"ad{i}", "--rank", "8", "--seed",
             str(i + 1)], env)
    modes = a.modes.split(",")
    name = Path(a.model).stem
    out = []
    for r in range(a.rounds):
        for mode in modes[r % len(modes):] + modes[:r % len(modes)]:  # rotated order
            start(mode, a, env, root)
            try:
                row = one_round(mode, a, name)
            finally:
                stop(mode, env)
            row["round"] = r
            out.append(row)
            print(f"[round {r}] {mode}: hit rate {row['hit_rate']:.3f}, latency p50 {row['lat_p50']:.3f} s",
                  file=sys.stderr, flush=True)
    print("| mode | round | requests | prefix hit rate | latency p50 / p95 (s) | TTFT p50 / p95 (s) | requests/s |")
    print("|---|---|---|---|---|---|---|")
    for x in sorted(out, key=lambda x: (modes.index(x["mode"]), x["round"])):
        ttft = "" if x["mode"] == "nginx" else f"{x['ttft_p50']:.3f} / {x['ttft_p95']:.3f}"
        print(f"| {x['mode']} | {x['round']} | {x['requests']} | {x['hit_rate']:.3f} | {x['lat_p50']:.3f} / "
              f"{x['lat_p95']:.3f} | {ttft} | {x['req_s']:.2f} |")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    if a.plot:
        plot([(f"{a.replicas} replicas, {a.turns} turns", out)], a.plot)


if __name__ == "__main__":
    main()
