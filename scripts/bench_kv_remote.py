#!/usr/bin/env python3
"""The remote KV tier (`--kv-remote`, Redis) measured.

ttft: a --doc-tokens document computed on replica A; replica B's time to the
  first token for it plus a short question, with the tier (it loads A's
  blocks) and without (a replica that recomputes), interleaved, --reps times
  on fresh documents. Reports each pair's ratio and the bytes B loaded.
load: --agents agents, each growing a trajectory for --turns turns against
  --replicas replicas behind nginx (scripts/cluster.sh) with no session
  affinity (each turn may land on another replica), with the tier and
  without, and against one replica: requests/s and the share of prompt
  tokens served from cache.
fault: the same load, turn by turn (every agent finishes a turn before the
  next starts), with the tier and Redis killed after --kill-after-turn, and
  without a tier: per turn, the share of prompt tokens served from cache in
  each, failed requests, and what the replicas' /metrics and logs say. After
  the kill the tier's share should fall to the no-tier one (local hits only),
  with no failed request.

Redis is started here on loopback (--maxmemory 1gb, allkeys-lru).

    .venv/bin/python scripts/bench_kv_remote.py ttft --doc-tokens 4096 --reps 5
    .venv/bin/python scripts/bench_kv_remote.py load --replicas 3 --agents 16 --turns 4
    .venv/bin/python scripts/bench_kv_remote.py fault --replicas 3 --agents 16 --turns 6
"""
import argparse
import contextlib
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from server_util import Server, free_port, metric, parse_metrics  # noqa: E402


class Redis:
    def __init__(self):
        self.port = free_port()
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--maxmemory", "1gb", "--maxmemory-policy", "allkeys-lru"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            r = subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True)
            if r.stdout.strip() == "PONG":
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def stop(self):
        self.proc.kill()
        self.proc.wait(10)


def timed(server, prompt):
    t = time.perf_counter()
    status, data = server.post_json("/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0})
    if status != 200:
        raise RuntimeError(data[:300])
    return time.perf_counter() - t, json.loads(data)["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)


def wait_written(server, n, timeout_s=30):
    """Until the replica has written n blocks to the tier."""
    t = time.monotonic()
    while metric(server.metrics(), "agentkv_kv_remote_written_total") < n:
        if time.monotonic() - t > timeout_s:
            raise RuntimeError(f"fewer than {n} blocks written in {timeout_s} s")
        time.sleep(0.02)


def ttft(args):
    redis = Redis()
    common = ["--kv-cache-mb", args.kv_cache_mb, "--lr-cache-rank", 0, "--max-model-len", args.doc_tokens + 256]
    remote = ["--kv-remote", redis.url, "--kv-remote-wait-s", 10]
    a = Server(args.agentkv, args.model, [*common, *remote], threads=args.threads)
    b = Server(args.agentkv, args.model, [*common, *remote], threads=args.threads)
    c = Server(args.agentkv, args.model, common, threads=args.threads)
    rows = []
    try:
        timed(c, [1000 + i for i in range(64)])  # warm both
        timed(b, [2000 + i for i in range(64)])
        for rep in range(args.reps):
            rng = random.Random(args.seed * 1000 + rep)
            doc = [rng.randrange(1000, 20000) for _ in range(args.doc_tokens)]
            q = [rng.randrange(1000, 20000) for _ in range(16)]
            w0 = metric(a.metrics(), "agentkv_kv_remote_written_total")
            timed(a, doc)
            wait_written(a, w0 + args.doc_tokens // 16 - 1)  # A's writes are asynchronous
            bytes0 = metric(b.metrics(), "agentkv_kv_remote_loaded_bytes_total")
            pair = [None, None]
            for mode in ((0, 1) if rep % 2 == 0 else (1, 0)):
                pair[mode] = timed(b if mode == 0 else c, doc + q)
            loaded = metric(b.metrics(), "agentkv_kv_remote_loaded_bytes_total") - bytes0
            rows.append((pair[0][0], pair[1][0], pair[0][1], loaded))
            print(f"  rep {rep + 1}/{args.reps}: with {pair[0][0]:.3f} s, without {pair[1][0]:.3f} s", file=sys.stderr)
    finally:
        for s in (a, b, c):
            s.stop()
        redis.stop()
    ratios = [w / wo for w, wo, _, _ in rows]
    print(f"\n{args.doc_tokens}-token document computed on A; B asks for it plus 16 tokens; "
          f"{args.threads} threads per replica; {args.reps} interleaved pairs\n")
    print("| rep | B with the tier (s) | without: recompute (s) | ratio | cached tokens | bytes loaded |")
    print("|---:|---:|---:|---:|---:|---:|")
    for i, (w, wo, cached, loaded) in enumerate(rows):
        print(f"| {i + 1} | {w:.3f} | {wo:.3f} | {w / wo:.3f} | {cached} | {loaded / 2**20:.1f} MiB |")
    print(f"\nmedian ratio {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); "
          f"bar <= 0.25")


@contextlib.contextmanager
def cluster(args, n, redis):
    """scripts/cluster.sh with n replicas (and --kv-remote when redis is given); yields (nginx port, state dir)."""
    script = str(ROOT / "scripts" / "cluster.sh")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, AGENTKV_CLUSTER_DIR=tmp, AGENTKV_BIN=args.agentkv)
        flags = ["--model", args.model, "--threads", "1", "--kv-cache-mb", str(args.kv_cache_mb), "--lr-cache-rank",
                 "0"]
        if redis:
            flags += ["--kv-remote", redis.url]
        port = free_port()
        subprocess.run([script, "start", "--replicas", str(n), "--port", str(port), "--", *flags], env=env,
                       check=True, capture_output=True)
        try:
            yield port, tmp
        finally:
            subprocess.run([script, "stop"], env=env, capture_output=True)


def agent_load(port, args, seed):
    """--agents agents x --turns turns through 127.0.0.1:port; (requests/s, cached share, failures)."""
    words = "agent tool cache block prefix router replica adapter model token query answer river stone".split()
    stats = {"req": 0, "prompt": 0, "cached": 0, "fail": 0}
    lock = threading.Lock()

    def one(k):
        rng = random.Random(seed * 100 + k)
        text = f"Agent {k} {rng.random():.8f} task: " + " ".join(rng.choice(words) for _ in range(args.context_words))
        for _ in range(args.turns):
            text += " Observation: " + " ".join(rng.choice(words) for _ in range(30))
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            try:
                c.request("POST", "/v1/completions", json.dumps({"prompt": text, "max_tokens": 16, "temperature": 0}),
                          {"Content-Type": "application/json"})
                r = c.getresponse()
                data = r.read()
            finally:
                c.close()
            with lock:
                stats["req"] += 1
                if r.status != 200:
                    stats["fail"] += 1
                    continue
                j = json.loads(data)
                stats["prompt"] += j["usage"]["prompt_tokens"]
                stats["cached"] += j["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
            text += j["choices"][0]["text"]

    t = time.perf_counter()
    threads = [threading.Thread(target=one, args=(k,)) for k in range(args.agents)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    dt = time.perf_counter() - t
    return stats["req"] / dt, stats["cached"] / max(1, stats["prompt"]), stats["fail"], dt


def load(args):
    rows = []
    for name, n, with_tier in (("3 replicas, Redis tier", args.replicas, True),
                               ("3 replicas, no tier", args.replicas, False),
                               ("1 replica", 1, False)):
        redis = Redis() if with_tier else None
        try:
            with cluster(args, n, redis) as (port, _):
                rps, hit, fail, dt = agent_load(port, args, args.seed)
        finally:
            if redis:
                redis.stop()
        rows.append((name.replace("3", str(args.replicas)), rps, hit, fail, dt))
        print(f"  {rows[-1][0]}: {rps:.2f} req/s, {100 * hit:.0f}% cached", file=sys.stderr)
    print(f"\n{args.agents} agents x {args.turns} turns, contexts from {args.context_words} words growing 30 per "
          f"turn, 16 tokens out, no session affinity; 1 thread per replica\n")
    print("| setup | requests/s | prompt tokens from cache | failed | seconds |")
    print("|---|---:|---:|---:|---:|")
    for name, rps, hit, fail, dt in rows:
        print(f"| {name} | {rps:.2f} | {100 * hit:.0f}% | {fail} | {dt:.0f} |")


def turns_load(port, args, seed, after_turn=None):
    """agent_load's agents turn by turn; after_turn(t) runs once every agent
    has finished turn t. Per turn: [requests, prompt tokens, cached, failed]."""
    words = "agent tool cache block prefix router replica adapter model token query answer river stone".split()
    per_turn = [[0, 0, 0, 0] for _ in range(args.turns)]
    lock = threading.Lock()
    barrier = threading.Barrier(args.agents)

    def one(k):
        rng = random.Random(seed * 100 + k)
        text = f"Agent {k} {rng.random():.8f} task: " + " ".join(rng.choice(words) for _ in range(args.context_words))
        for t in range(args.turns):
            text += " Observation: " + " ".join(rng.choice(words) for _ in range(30))
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            status, data = 0, b""
            try:
                c.request("POST", "/v1/completions", json.dumps({"prompt": text, "max_tokens": 16, "temperature": 0}),
                          {"Content-Type": "application/json"})
                r = c.getresponse()
                status, data = r.status, r.read()
            except OSError:
                pass
            finally:
                c.close()
            with lock:
                row = per_turn[t]
                row[0] += 1
                if status != 200:
                    row[3] += 1
                else:
                    j = json.loads(data)
                    row[1] += j["usage"]["prompt_tokens"]
                    row[2] += j["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
                    text += j["choices"][0]["text"]
            if barrier.wait() == 0 and after_turn is not None:
                after_turn(t)
            barrier.wait()  # after_turn is done before anyone goes on

    threads = [threading.Thread(target=one, args=(k,)) for k in range(args.agents)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return per_turn


def replica_metrics(tmp, n):
    """Sums of the remote-tier metrics over the cluster's replicas, and the log lines saying the tier is down."""
    sums, said = {}, 0
    for i in range(n):
        port_file = Path(tmp) / f"replica-{i}.port"
        log = Path(tmp) / f"replica-{i}.log"
        if port_file.exists():
            c = http.client.HTTPConnection("127.0.0.1", int(port_file.read_text()), timeout=10)
            c.request("GET", "/metrics")
            samples = parse_metrics(c.getresponse().read().decode())
            c.close()
            for name in ("agentkv_kv_remote_up", "agentkv_kv_remote_errors_total",
                         "agentkv_kv_remote_blocks_loaded_total"):
                sums[name] = sums.get(name, 0) + metric(samples, name)
        if log.exists():
            said += sum("kv-remote" in line and "unavailable" in line for line in log.read_text().splitlines())
    return sums, said


def fault(args):
    kill_after = args.kill_after_turn if args.kill_after_turn is not None else args.turns // 2 - 1
    arms = {}
    for name, with_tier in (("tier, Redis killed", True), ("no tier", False)):
        redis = Redis() if with_tier else None
        seen = {}
        with cluster(args, args.replicas, redis) as (port, tmp):

            def after_turn(t):
                print(f"  {name}: turn {t + 1}/{args.turns} done", file=sys.stderr)
                if redis and t == kill_after:
                    seen["before"] = replica_metrics(tmp, args.replicas)
                    redis.stop()
                    print("  Redis killed", file=sys.stderr)

            per_turn = turns_load(port, args, args.seed, after_turn)
            seen["after"] = replica_metrics(tmp, args.replicas)
        if redis:
            redis.stop()  # when the kill comes after the last turn
        arms[name] = (per_turn, seen)
    print(f"\n{args.agents} agents x {args.turns} turns in lockstep over {args.replicas} replicas behind nginx, no "
          f"session affinity; contexts from {args.context_words} words growing 30 per turn; Redis killed after turn "
          f"{kill_after + 1}\n")
    print("| turn | Redis | tier: from cache | no tier: from cache | tier: failed | no tier: failed |")
    print("|---:|---|---:|---:|---:|---:|")
    tier, none = arms["tier, Redis killed"][0], arms["no tier"][0]
    for t in range(args.turns):
        share = [100 * r[t][2] / max(1, r[t][1]) for r in (tier, none)]
        print(f"| {t + 1} | {'up' if t <= kill_after else 'killed'} | {share[0]:.0f}% | {share[1]:.0f}% | "
              f"{tier[t][3]} of {tier[t][0]} | {none[t][3]} of {none[t][0]} |")
    seen = arms["tier, Redis killed"][1]
    b, a = seen.get("before", ({}, 0)), seen.get("after", ({}, 0))
    print(f"\nreplicas with the tier up: {b[0].get('agentkv_kv_remote_up', 0):.0f} of {args.replicas} before the "
          f"kill, {a[0].get('agentkv_kv_remote_up', 0):.0f} after; agentkv_kv_remote_errors_total "
          f"{b[0].get('agentkv_kv_remote_errors_total', 0):.0f} -> {a[0].get('agentkv_kv_remote_errors_total', 0):.0f}; "
          f"blocks loaded {b[0].get('agentkv_kv_remote_blocks_loaded_total', 0):.0f} -> "
          f"{a[0].get('agentkv_kv_remote_blocks_loaded_total', 0):.0f}; 'unavailable' log lines: {a[1]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["ttft", "load", "fault"])
    ap.add_argument("--agentkv", default=str(ROOT / "build" / "agentkv"))
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--doc-tokens", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-cache-mb", type=int, default=256)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--agents", type=int, default=16)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--context-words", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kill-after-turn", type=int, default=None,
                    help="fault: kill Redis once every agent has finished this turn (0-based; default turns/2 - 1)")
    args = ap.parse_args()
    {"ttft": ttft, "load": load, "fault": fault}[args.mode](args)


if __name__ == "__main__":
    main()
