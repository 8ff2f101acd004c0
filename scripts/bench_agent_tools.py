#!/usr/bin/env python3
"""A ReAct agent workload with tool pauses, through the openai SDK: does an
agent session keep its cache across the pause?

Each of --agents concurrent agents runs --tasks tasks. A task starts from the
agent's own context (a system prompt with a --context-tokens document) and
repeats --rounds times: the `plan` role thinks (free text), the `action` role
calls a tool (tool_choice required, constrained to the tool's schema), the
tool "runs" for a uniform 0.5-3 s pause, its result is appended; then the
`reflect` role answers (tool_choice none). Roles are adapters on one
trajectory (--roles, default the LRAgent role adapters in tools/lragent/, served
under --kv-sharing, default `full`, so they share one K/V copy); each request
sends the whole conversation so far.

The KV budget (--kv-cache-mb) is set so that the agents' trajectories do not
all fit: during a tool pause the others' prefills evict what is not protected.
Modes, run one after the other on one server each (--modes):
  nosession   agentkv serve, no session fields
  session     agentkv serve, every request of a task carries session_id
  llama-server  llama.cpp's server (scripts/setup_bench.sh builds it) on the
              same GGUF with --jinja (its tool-call support), -np = agents,
              -c = the token capacity agentkv's --kv-cache-mb gives, and the
              base model for every role (it cannot load PEFT adapters)
Reported per mode: completed tasks/s, TTFT after a tool result (p50, p95: the
first streamed token of the request that follows the pause), prefill tokens
per turn (prompt - cached), and the cache hit rate (cached / prompt tokens).
A Markdown table on stdout; --plot writes a bar chart (needs matplotlib).
  python3 scripts/bench_agent_tools.py --agents 8 --tasks 2 --seed 1
"""
import argparse
import json
import os
import socket
import urllib.request
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = {"type": "function", "function": {
    "name": "lookup", "description": "Look a fact up in the knowledge base",
    "parameters": {"type": "object", "properties": {"query": {"type": "string", "maxLength": 40}},
                   "required": ["query"], "additionalProperties": False}}}
WORDS = ("river stone garden engine market signal harbor lantern copper meadow orbit canyon pepper violet "
         "anchor thunder ribbon marble falcon cedar glacier ember quartz willow saddle comet timber").split()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


class Server:
    def __init__(self, args):
        cmd = [str(ROOT / "build/agentkv"), "serve", "--host", "127.0.0.1", "--port", "0", "--threads",
               str(args.threads), "--kv-cache-mb", str(args.kv_cache_mb), "--kv-sharing", args.kv_sharing,
               "--max-model-len", "8192", "--served-model-name", "base", "--lr-cache-rank", "0"]
        for r in args.roles:
            cmd += ["--adapter", f"{r}={ROOT / 'tools/lragent/adapters' / r}"]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=ROOT)
        for raw in self.proc.stderr:
            m = re.search(rb"listening on http://([^\s:/]+):(\d+)", raw)
            if m:
                self.url = f"http://{m.group(1).decode()}:{int(m.group(2))}/v1"
                threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()
                return
        raise SystemExit("agentkv serve did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class LlamaServer:
    def __init__(self, args):
        bin_dir = Path(os.environ.get("AGENTKV_LLAMA_DIR", Path.home() / ".cache/agentkv/llama.cpp")) / "build/bin"
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        # The tokens agentkv's pool holds at this budget (22.5 KiB per token in f16).
        ctx = args.kv_cache_mb * (1 << 20) // 23040 // args.agents * args.agents
        cmd = [str(bin_dir / "llama-server"), "-m", str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"),
               "--host", "127.0.0.1", "--port", str(port), "-t", str(args.threads), "-np", str(args.agents),
               "-c", str(ctx), "--jinja", "--no-webui"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{port}/v1"
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise SystemExit("llama-server did not start (scripts/setup_bench.sh builds it)")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def agent(client, args, idx, session, rec, lock):
    rng = random.Random(args.seed * 1000 + idx)
    doc = " ".join(rng.choice(WORDS) for _ in range(args.context_tokens))
    for task in range(args.tasks):
        messages = [{"role": "system", "content": f"You are agent {idx}. Notes:\n{doc}"},
                    {"role": "user", "content": f"Task {task}: find what the notes say about {rng.choice(WORDS)}."}]
        extra = {"session_id": f"agent-{idx}-task-{task}", "session_retention_s": 30} if session else {}
        after_tool = False

        def call(role, max_tokens=args.max_tokens, **kw):
            nonlocal after_tool
            t0 = time.perf_counter()
            first, usage, text, calls = None, None, "", {}
            stream = client.chat.completions.create(
                model=role, messages=messages, stream=True, stream_options={"include_usage": True},
                temperature=0, max_tokens=max_tokens, extra_body=extra, **kw)
            for chunk in stream:
                if chunk.usage:
                    usage = chunk.usage
                for c in chunk.choices:
                    if first is None and (c.delta.content or c.delta.tool_calls):
                        first = time.perf_counter() - t0
                    text += c.delta.content or ""
                    for d in c.delta.tool_calls or []:
                        calls[d.index] = d
            with lock:
                if after_tool and first is not None:
                    rec["ttft_after_tool"].append(first)
                details = usage.prompt_tokens_details if usage else None
                cached = (details.cached_tokens if details else 0) or 0
                prompt = usage.prompt_tokens if usage else 0
                rec["prompt"] += prompt
                rec["cached"] += cached
                rec["prefill"].append(prompt - cached)
            after_tool = False
            return text, [calls[i] for i in sorted(calls)]

        for rnd in range(args.rounds):
            # Every request lists the tool (as agent frameworks do), so the
            # rendered system turn, and with it the cached prefix, is the same.
            thought, _ = call(args.roles[0], tools=[TOOL], tool_choice="none")
            messages.append({"role": "assistant", "content": thought or "Let me look it up."})
            _, calls = call(args.roles[1 % len(args.roles)], max_tokens=96, tools=[TOOL], tool_choice="required",
                            parallel_tool_calls=False)
            if not calls:  # cut at max_tokens: count it and go on without the call
                with lock:
                    rec["no_call"] += 1
                continue
            c = calls[0]
            messages.append({"role": "assistant", "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}]})
            time.sleep(rng.uniform(0.5, 3.0))  # the tool runs
            messages.append({"role": "tool", "tool_call_id": c.id,
                             "content": json.dumps({"result": " ".join(rng.choice(WORDS) for _ in range(12))})})
            after_tool = True
        answer, _ = call(args.roles[-1], tools=[TOOL], tool_choice="none")
        if session:  # the task is done: its blocks need no protection any more
            client.delete(f"/sessions/{extra['session_id']}", cast_to=object)
        with lock:
            rec["tasks"] += 1


def run_mode(args, mode):
    import openai
    peer = mode == "llama-server"
    server = LlamaServer(args) if peer else Server(args)
    if peer:
        args = argparse.Namespace(**{**vars(args), "roles": ["base"] * len(args.roles)})
    try:
        client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=600)
        rec = {"tasks": 0, "no_call": 0, "ttft_after_tool": [], "prefill": [], "prompt": 0, "cached": 0}
        lock = threading.Lock()
        threads = [threading.Thread(target=agent, args=(client, args, i, mode == "session", rec, lock))
                   for i in range(args.agents)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rec["wall"] = time.perf_counter() - t0
        return rec
    finally:
        server.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="think -> tool call -> pause rounds per task")
    ap.add_argument("--context-tokens", type=int, default=500, help="words in each agent's notes (~1.3 tokens each)")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--kv-cache-mb", type=int, default=48)
    ap.add_argument("--kv-sharing", default="full")
    ap.add_argument("--roles", nargs="+", default=["plan", "action", "reflect"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--modes", nargs="+", default=["nosession", "session"])
    ap.add_argument("--plot", help="write a PNG bar chart here")
    args = ap.parse_args()
    results = {}
    for mode in args.modes:
        print(f"running {mode} ...", file=sys.stderr)
        results[mode] = run_mode(args, mode)
    print(f"{args.agents} agents x {args.tasks} tasks x {args.rounds} tool rounds, roles {','.join(args.roles)}, "
          f"kv_sharing {args.kv_sharing}, --kv-cache-mb {args.kv_cache_mb}, seed {args.seed}\n")
    print("| mode | tasks/s | TTFT after tool p50 (s) | p95 (s) | prefill tokens/turn | cache hit rate | calls cut |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode, r in results.items():
        print(f"| {mode} | {r['tasks'] / r['wall']:.3f} | {pct(r['ttft_after_tool'], 50):.3f} | "
              f"{pct(r['ttft_after_tool'], 95):.3f} | {statistics.mean(r['prefill']):.0f} | "
              f"{r['cached'] / max(r['prompt'], 1):.2f} | {r['no_call']} |")
    if len(results) == 2 and "session" in results and "nosession" in results:
        s, n = results["session"], results["nosession"]
        print(f"\nsession vs nosession: tasks/s {s['tasks'] / s['wall'] / (n['tasks'] / n['wall']):.2f}x, "
              f"p95 TTFT after a tool {pct(n['ttft_after_tool'], 95) / pct(s['ttft_after_tool'], 95):.2f}x lower")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 3, figsize=(11, 3.2))
        modes = list(results)
        ax[0].bar(modes, [results[m]["tasks"] / results[m]["wall"] for m in modes]); ax[0].set_title("tasks/s")
        ax[1].bar(modes, [pct(results[m]["ttft_after_tool"], 95) for m in modes]); ax[1].set_title("p95 TTFT after tool (s)")
        ax[2].bar(modes, [results[m]["cached"] / max(results[m]["prompt"], 1) for m in modes]); ax[2].set_title("cache hit rate")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
