#!/usr/bin/env python3
"""A ReAct agent workload with tool pauses, through the openai SDK: does an
agent session keep its cache across the pause?

Each of --agents concurrent agents runs --tasks tasks. A task starts from the
agent's own context (a system prompt with a --context-tokens document) and
repeats --rounds times: the `plan` role thinks (free text), the `action` role
calls a tool (tool_choice required, constrained to the tool's schema), the
tool "runs" for a uniform --pause pause (default 0.5-3 s), its result is
appended; then the
`reflect` role answers (tool_choice none). Roles are adapters on one
trajectory (--roles, default the LRAgent role adapters in tools/lragent/, served
under --kv-sharing, default `full`, so they share one K/V copy); each request
sends the whole conversation so far.

The KV budget (--kv-cache-mb) is set so that the agents' trajectories do not
all fit: during a tool pause the others' prefills evict what is not protected.
--max-running bounds the requests the server runs at once (the rest queue),
--session-share the pool share sessions may protect.
Modes, each on a fresh server, interleaved over --reps repetitions (the
order reversed every other one) (--modes):
  nosession   agentkv serve, no session fields
  session     agentkv serve, every request of a task carries session_id
  session-fcfs  the same with --no-session-priority: a session's next turn
              queues in arrival order instead of going first
  llama-server  llama.cpp's server (scripts/setup_bench.sh builds it) on the
              same GGUF with --jinja (its tool-call support), -np = the
              requests agentkv runs at once (min(agents, --max-running)),
              -c = the tokens agentkv's --kv-cache-mb holds, --cache-ram
              --peer-cache-ram (default 0: no host prompt cache, the same
              memory), and the base model for every role (it cannot load
              PEFT adapters; --roles base base base runs agentkv so too).
              It ignores tool_choice required on SmolLM2's template, so the
              action turn is asked by a user message and, where no call
              comes back (counted as cut), the same call is made for it
Reported per mode (medians over repetitions; TTFT percentiles pooled):
completed tasks/s, TTFT after a tool result (p50, p95: the
first streamed token of the request that follows the pause), prefill tokens
per turn (prompt - cached), and the cache hit rate (cached / prompt tokens).
With both agentkv modes, the paired session/nosession ratios of each
repetition (min-max) follow the table.
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
               "--max-model-len", "8192", "--served-model-name", "base", "--lr-cache-rank", "0",
               "--max-running", str(args.max_running), "--session-share", str(args.session_share)]
        if args.mode == "session-fcfs":
            cmd.append("--no-session-priority")
        for r in dict.fromkeys(args.roles):
            if r != "base":  # the base model itself
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
        # The same KV memory: -c = the tokens agentkv's pool holds at this
        # budget (22.5 KiB per token in f16), over as many slots as agentkv
        # runs requests at once, and its host-memory prompt cache at
        # --peer-cache-ram MiB (llama-server's default is 8192).
        slots = min(args.agents, args.max_running)
        ctx = args.kv_cache_mb * (1 << 20) // 23040 // slots * slots
        cmd = [str(bin_dir / "llama-server"), "-m", str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"),
               "--host", "127.0.0.1", "--port", str(port), "-t", str(args.threads), "-np", str(slots),
               "-c", str(ctx), "--cache-ram", str(args.peer_cache_ram), "--jinja", "--no-webui"]
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

        def call(role, max_tokens=args.max_tokens, opening=False, **kw):
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
                    for d in c.delta.tool_calls or []:  # the first delta names the call, later ones add arguments
                        got = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
                        got["id"] = d.id or got["id"]
                        if d.function:
                            got["name"] = d.function.name or got["name"]
                            got["arguments"] += d.function.arguments or ""
            with lock:
                if after_tool and first is not None:
                    rec["ttft_after_tool"].append(first)
                elif opening and first is not None:
                    rec["ttft_first"].append(first)
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
            thought, _ = call(args.roles[0], opening=rnd == 0, tools=[TOOL], tool_choice="none")
            messages.append({"role": "assistant", "content": thought or "Let me look it up."})
            if args.peer:
                # llama-server continues a trailing assistant message as a
                # prefix and then ignores the tools: a user turn asks instead.
                messages.append({"role": "user", "content": "Call the lookup tool now."})
            _, calls = call(args.roles[1 % len(args.roles)], max_tokens=96, tools=[TOOL], tool_choice="required",
                            parallel_tool_calls=False)
            if not calls or not calls[0]["name"]:
                with lock:
                    rec["no_call"] += 1
                if not args.peer:  # cut at max_tokens: count it and go on without the call
                    messages.pop()
                    continue
                # llama-server does not honour tool_choice required on this
                # model's template: the same call is made for it, so that the
                # trajectory keeps the same shape.
                calls = [{"id": f"call_{idx}_{rnd}", "name": TOOL["function"]["name"],
                          "arguments": json.dumps({"query": rng.choice(WORDS)})}]
            c = calls[0]
            messages.append({"role": "assistant", "tool_calls": [
                {"id": c["id"] or f"call_{idx}_{rnd}", "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"]}}]})
            time.sleep(rng.uniform(*args.pause))  # the tool runs
            messages.append({"role": "tool", "tool_call_id": messages[-1]["tool_calls"][0]["id"],
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
    args = argparse.Namespace(**{**vars(args), "peer": peer, "mode": mode})
    server = LlamaServer(args) if peer else Server(args)
    if peer:
        args = argparse.Namespace(**{**vars(args), "roles": ["base"] * len(args.roles)})
    try:
        client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=600)
        rec = {"tasks": 0, "no_call": 0, "ttft_after_tool": [], "ttft_first": [], "prefill": [], "prompt": 0,
               "cached": 0}
        lock = threading.Lock()
        threads = [threading.Thread(target=agent, args=(client, args, i, mode.startswith("session"), rec, lock))
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


def summarize(recs):
    """Medians over repetitions; TTFT percentiles over all of them pooled."""
    ttft = [x for r in recs for x in r["ttft_after_tool"]]
    return {"tps": statistics.median(r["tasks"] / r["wall"] for r in recs),
            "p50": pct(ttft, 50), "p95": pct(ttft, 95),
            "first95": pct([x for r in recs for x in r["ttft_first"]], 95),
            "prefill": statistics.median(statistics.mean(r["prefill"]) for r in recs),
            "hit": statistics.median(r["cached"] / max(r["prompt"], 1) for r in recs),
            "cut": sum(r["no_call"] for r in recs)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="think -> tool call -> pause rounds per task")
    ap.add_argument("--context-tokens", type=int, default=500, help="words in each agent's notes (~1.3 tokens each)")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--pause", type=float, nargs=2, default=[0.5, 3.0], metavar=("MIN", "MAX"),
                    help="a tool call's pause, uniform in [MIN, MAX] seconds")
    ap.add_argument("--kv-cache-mb", type=int, default=48)
    ap.add_argument("--kv-sharing", default="full")
    ap.add_argument("--max-running", type=int, default=64, help="agentkv serve --max-running")
    ap.add_argument("--session-share", type=float, default=0.5, help="agentkv serve --session-share")
    ap.add_argument("--peer-cache-ram", type=int, default=0,
                    help="llama-server --cache-ram MiB: its host-memory prompt cache (0: none, the same memory as agentkv)")
    ap.add_argument("--roles", nargs="+", default=["plan", "action", "reflect"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reps", type=int, default=1, help="repetitions, modes interleaved")
    ap.add_argument("--modes", nargs="+", default=["nosession", "session"])
    ap.add_argument("--plot", help="write a PNG bar chart here")
    args = ap.parse_args()
    runs = {m: [] for m in args.modes}
    for rep in range(args.reps):
        for mode in (args.modes if rep % 2 == 0 else args.modes[::-1]):
            print(f"rep {rep + 1}/{args.reps}: running {mode} ...", file=sys.stderr, flush=True)
            r = run_mode(args, mode)
            runs[mode].append(r)
            print(f"  {r['tasks'] / r['wall']:.3f} tasks/s, hit rate {r['cached'] / max(r['prompt'], 1):.2f}",
                  file=sys.stderr, flush=True)
    res = {m: summarize(rs) for m, rs in runs.items()}
    print(f"{args.agents} agents x {args.tasks} tasks x {args.rounds} tool rounds, pause {args.pause[0]:g}-"
          f"{args.pause[1]:g} s, roles {','.join(args.roles)}, kv_sharing {args.kv_sharing}, --kv-cache-mb "
          f"{args.kv_cache_mb}, --max-running {args.max_running}, --session-share {args.session_share}, "
          f"seed {args.seed}, {args.reps} rep(s)\n")
    print("| mode | tasks/s | TTFT after tool p50 (s) | p95 (s) | first turn's TTFT p95 (s) | prefill tokens/turn | "
          "cache hit rate | calls cut |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for mode, r in res.items():
        print(f"| {mode} | {r['tps']:.3f} | {r['p50']:.3f} | {r['p95']:.3f} | {r['first95']:.3f} | "
              f"{r['prefill']:.0f} | {r['hit']:.2f} | {r['cut']} |")
    for mode in ("session", "session-fcfs"):
        if mode not in runs or "nosession" not in runs:
            continue
        pairs = list(zip(runs[mode], runs["nosession"]))
        tps = [s["tasks"] / s["wall"] / (n["tasks"] / n["wall"]) for s, n in pairs]
        p95 = [pct(n["ttft_after_tool"], 95) / pct(s["ttft_after_tool"], 95) for s, n in pairs]
        print(f"\n{mode} vs nosession, paired per repetition: tasks/s {statistics.median(tps):.2f}x "
              f"({min(tps):.2f}-{max(tps):.2f}), p95 TTFT after a tool {statistics.median(p95):.2f}x lower "
              f"({min(p95):.2f}-{max(p95):.2f})")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 3, figsize=(11, 3.2))
        modes = list(res)
        ax[0].bar(modes, [res[m]["tps"] for m in modes]); ax[0].set_title("tasks/s")
        ax[1].bar(modes, [res[m]["p95"] for m in modes]); ax[1].set_title("p95 TTFT after tool (s)")
        ax[2].bar(modes, [res[m]["hit"] for m in modes]); ax[2].set_title("cache hit rate")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
