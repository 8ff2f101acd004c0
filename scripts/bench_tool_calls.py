#!/usr/bin/env python3
"""How often a model makes a right, schema-valid tool call with tool_choice
auto, through agentkv serve and llama-server --jinja, on the same GGUF files.

The suite is tools/tool_suite/tasks.json: 24 tasks that need a tool and 8 that
need none. Each task is one chat request (the user's prompt, the tools it
offers, tool_choice auto, temperature 0, --max-tokens), sent to each engine on
each model file (--models), engines interleaved per task. Per response:
  call    at least one tool call came back (message.tool_calls)
  valid   a call came back, and every call names an offered tool and its
          arguments are JSON that the tool's parameters schema accepts
  right   valid, and the calls include the task's first expected tool
  fp      (tasks that need none) any call came back: a false positive
A Markdown table on stdout (counts out of 24 and 8), then, per model, the
paired comparison on the tool tasks of each agentkv variant against
llama-server: tasks right in one only, with an exact two-sided sign test.
Engines: agentkv (a bare JSON object naming a tool is a call under auto, the
default), agentkv-strict (--no-bare-tool-calls: only <tool_call>), and
llama-server. --json writes every response.

  python3 scripts/bench_tool_calls.py --models models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
  python3 scripts/bench_tool_calls.py --engines agentkv --models models/SmolLM2-135M-Instruct.Q4_1.gguf

llama-server comes from scripts/setup_bench.sh ($AGENTKV_LLAMA_DIR); the
jsonschema package from .venv (scripts/setup_python.sh test).
"""
import argparse
import json
import os
import sys
import time
import urllib.error
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from peer_server import Server, free_port  # noqa: E402

SUITE = ROOT / "tools" / "tool_suite" / "tasks.json"


def start_engine(kind, model, threads):
    """agentkv serve (kind agentkv or agentkv-strict) or llama-server --jinja on the file."""
    port = free_port()
    if kind.startswith("agentkv"):
        cmd = [str(ROOT / "build/agentkv"), "serve", "-m", str(model), "--host", "127.0.0.1", "--port",
               str(port), "--threads", str(threads), "--max-model-len", "4096"]
        if kind == "agentkv-strict":
            cmd.append("--no-bare-tool-calls")
    else:
        bin_dir = Path(os.environ.get("AGENTKV_LLAMA_DIR", Path.home() / ".cache/agentkv/llama.cpp")) / "build/bin"
        cmd = [str(bin_dir / "llama-server"), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
               "-t", str(threads), "-c", "4096", "-np", "1", "--jinja", "--no-webui"]
    return Server(cmd, f"http://127.0.0.1:{port}")


def chat(server, body):
    try:
        return server.post("/v1/chat/completions", body)
    except urllib.error.HTTPError as e:
        return {"error": f"HTTP {e.code}: {e.read()[:300].decode(errors='replace')}"}


def sign_test(a, b):
    """Two-sided exact sign test on a and b discordant pairs."""
    from math import comb
    n, k = a + b, min(a, b)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2 ** n)


def judge(task, tools, resp):
    """(call, valid, right) for one response."""
    import jsonschema
    if "error" in resp:
        return False, False, False
    msg = resp["choices"][0]["message"]
    calls = msg.get("tool_calls") or []
    if not calls:
        return False, False, False
    valid = True
    for c in calls:
        name = c.get("function", {}).get("name")
        if name not in task["tools"]:
            valid = False
            continue
        try:
            args = json.loads(c["function"].get("arguments") or "{}")
            jsonschema.validate(args, tools[name]["function"]["parameters"])
        except (ValueError, jsonschema.ValidationError):
            valid = False
    names = {c.get("function", {}).get("name") for c in calls}
    return True, valid, valid and bool(task["expect"]) and task["expect"][0] in names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True, help="comma-separated GGUF files")
    ap.add_argument("--engines", default="agentkv,llama-server",
                    help="agentkv (bare JSON calls recognised, the default), agentkv-strict "
                         "(--no-bare-tool-calls) and/or llama-server")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write every response here")
    ap.add_argument("--limit", type=int, default=0,
                    help="only the first N tool tasks and N no-tool tasks (a smoke run; the table is then not the suite's)")
    args = ap.parse_args()
    suite = json.loads(SUITE.read_text())
    tools, tasks = suite["tools"], suite["tasks"]
    if args.limit > 0:
        tasks = [t for t in tasks if t["expect"]][:args.limit] + [t for t in tasks if not t["expect"]][:args.limit]
    engines = args.engines.split(",")
    out, rows = [], []
    for model in args.models.split(","):
        started = {e: start_engine(e, model, args.threads) for e in engines}
        try:
            res = {e: {} for e in engines}
            for i, task in enumerate(tasks):
                order = engines if i % 2 == 0 else engines[::-1]
                for e in order:
                    body = {"messages": [{"role": "user", "content": task["prompt"]}],
                            "tools": [tools[t] for t in task["tools"]], "tool_choice": "auto",
                            "temperature": 0, "max_tokens": args.max_tokens}
                    t0 = time.monotonic()
                    resp = chat(started[e], body)
                    res[e][task["id"]] = judge(task, tools, resp)
                    out.append({"model": Path(model).name, "engine": e, "task": task["id"],
                                "seconds": round(time.monotonic() - t0, 2), "judged": res[e][task["id"]],
                                "response": resp})
                print(f"[bench_tool_calls] {Path(model).name} {task['id']}: " +
                      ", ".join(f"{e}={'right' if res[e][task['id']][2] else 'call' if res[e][task['id']][0] else '-'}"
                                for e in engines), file=sys.stderr)
        finally:
            for s in started.values():
                s.stop()
        need = [t for t in tasks if t["expect"]]
        none = [t for t in tasks if not t["expect"]]
        for e in engines:
            r = res[e]
            rows.append((Path(model).name, e, sum(r[t["id"]][0] for t in need), sum(r[t["id"]][1] for t in need),
                         sum(r[t["id"]][2] for t in need), len(need), sum(r[t["id"]][0] for t in none), len(none)))
        if "llama-server" in engines:
            b = "llama-server"
            for a in [e for e in engines if e != b]:
                only_a = [t["id"] for t in need if res[a][t["id"]][2] and not res[b][t["id"]][2]]
                only_b = [t["id"] for t in need if res[b][t["id"]][2] and not res[a][t["id"]][2]]
                rows.append((Path(model).name, f"paired: right in {a} only {len(only_a)}, in {b} only "
                             f"{len(only_b)} (sign test p = {sign_test(len(only_a), len(only_b)):.2g})"))
    print("| model | engine | call | valid | right | false positives |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        if len(row) == 2:
            print(f"| {row[0]} | {row[1]} | | | | |")
        else:
            m, e, c, v, r, n, fp, nn = row
            print(f"| {m} | {e} | {c}/{n} | {v}/{n} | {r}/{n} | {fp}/{nn} |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
