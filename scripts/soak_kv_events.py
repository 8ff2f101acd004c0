#!/usr/bin/env python3
"""Wire compatibility of `agentkv serve --kv-events` under an agent load.

One replica (--kv-sharing alora, a LoRA and an aLoRA adapter, two tenants, a
pool small enough to evict) serves --agents agent threads for --duration
seconds: each agent grows a trajectory turn by turn, the base, the LoRA and
the aLoRA adapter taking turns on it. A subscriber that reads all the time
decodes every batch with vLLM's own classes (tests/python/vllm_kv_events.py),
fills gaps by replay, and rebuilds the replica's blocks. At the end it must
equal what the replica reports in /metrics: every hash announced and not
removed (agentkv_kv_events_hashes), and every block of the prefix index plus
one alias per base block (agentkv_kv_prefix_blocks). A replay from the
middle must return the batches received, byte for byte.

    .venv/bin/python scripts/soak_kv_events.py --duration 600
"""
import argparse
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import zmq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
import vllm_kv_events  # noqa: E402
from kv_events_client import Collector, apply, complete_sequence, decode_all, replay_from  # noqa: E402
from server_util import Server, free_port, metric  # noqa: E402

TOPIC = b"kv@soak"
INVOCATION = " Answer:"
WORDS = "agent tool cache block prefix router replica adapter model token query answer river stone".split()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agentkv", default=str(ROOT / "build" / "agentkv"))
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--kv-cache-mb", type=int, default=24)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    ev = vllm_kv_events.load()
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    collector = Collector(sub, TOPIC)
    replay = f"tcp://127.0.0.1:{free_port()}"
    with tempfile.TemporaryDirectory() as tmp:
        for name, seed, extra in (("a", 1, []), ("inv", 3, ["--alora-invocation", INVOCATION])):
            subprocess.run([args.agentkv, "synth-adapter", "--model", args.model, "--out", f"{tmp}/{name}", "--rank",
                            "8", "--seed", str(seed), *extra], check=True, capture_output=True)
        server = Server(args.agentkv, args.model, [
            "--block-size", args.block_size, "--kv-cache-mb", args.kv_cache_mb, "--lr-cache-rank", 0,
            "--max-model-len", 2048, "--kv-sharing", "alora", "--api-key", "k1=t1", "--api-key", "k2=t2",
            "--adapter", f"a={tmp}/a", "--adapter", f"inv={tmp}/inv:alora",
            "--kv-events", f"tcp://127.0.0.1:{port}", "--kv-events-replay", replay, "--kv-events-topic", TOPIC.decode(),
            "--kv-events-buffer", 1 << 20])
        counts, errors, lock = [0], [], threading.Lock()
        t_end = time.monotonic() + args.duration

        def agent(k):
            rng = random.Random(args.seed * 100 + k)
            key = "k1" if k % 2 == 0 else "k2"
            while time.monotonic() < t_end:
                text = f"Task {k}-{rng.random():.6f}:"
                for turn in range(rng.randrange(3, 9)):
                    text += " " + " ".join(rng.choice(WORDS) for _ in range(rng.randrange(20, 60)))
                    model = ("", "a", "inv")[turn % 3]
                    body = {"prompt": text + (INVOCATION if model == "inv" else ""), "max_tokens": 8, "temperature": 0}
                    if model:
                        body["model"] = model
                    status, data = server.post_json("/v1/completions", body, api_key=key)
                    with lock:
                        counts[0] += 1
                        if status != 200:
                            errors.append((status, data[:200]))
                    if status == 200:
                        text += json.loads(data)["choices"][0]["text"]
                    if time.monotonic() >= t_end:
                        break

        threads = [threading.Thread(target=agent, args=(k,)) for k in range(args.agents)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            time.sleep(min(30, max(1, args.duration / 10)))
            print(f"  {time.monotonic() - t0:.0f} s: {counts[0]} requests", file=sys.stderr, flush=True)
        for t in threads:
            t.join()
        msgs = collector.take(2.0)
        have = complete_sequence(msgs, replay, TOPIC)
        batches = decode_all(have, ev)
        view = {}
        removed = sum(apply(view, b, ev, args.block_size) for b in batches)
        stored = sum(len(e.block_hashes) for b in batches for e in b.events if isinstance(e, ev.BlockStored))
        mid = max(have) // 2
        rep = replay_from(replay, mid, TOPIC)
        replay_ok = [s for s, _ in rep] == [s for s in sorted(have) if s >= mid] and all(have[s] == p for s, p in rep)
        m = server.metrics()
        server.stop()
    collector.close()
    sub.close(0)
    ctx.term()
    base = sum(1 for v in view.values() if v[0] is None)
    hashes, indexed = metric(m, "agentkv_kv_events_hashes"), metric(m, "agentkv_kv_prefix_blocks")
    ok = len(view) == hashes == indexed + base and not errors and replay_ok
    print(f"\n{args.duration:.0f} s, {args.agents} agents, {counts[0]} requests ({len(errors)} failed), "
          f"{len(have)} batches ({len(have) - len(msgs)} received by replay only), "
          f"{stored} hashes stored, {removed} removed\n")
    print("| subscriber's blocks | agentkv_kv_events_hashes | agentkv_kv_prefix_blocks + base blocks' aliases | replay from the middle | result |")
    print("|---:|---:|---:|---|---|")
    print(f"| {len(view)} | {hashes:.0f} | {indexed:.0f} + {base} = {indexed + base:.0f} | "
          f"{len(rep)} batches, {'identical' if replay_ok else 'DIFFERENT'} | {'equal' if ok else 'NOT EQUAL'} |")
    for e in errors[:5]:
        print("error:", e)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
