#!/usr/bin/env python3
"""Runs the plan/action/reflect pipeline of task.py against `agentkv serve`
and reports the task accuracy per KV-sharing scheme.

Per question, the trajectory is a list of token ids: the context (system +
documents + question, opened assistant turn) tokenized once by the server's
POST /tokenize, then per line the role's label ids ("Plan:", "Action:",
"Answer:", tokenized once), the agent's generated ids as they came back, and
the newline id (the role's end marker, which the agent stops on and the
controller appends). It is never detokenized and re-tokenized (LRAgent
pitfall, docs/scheme_algorithms.md §1.6). Roles run in the order plan, action, plan,
action, reflect; each is a completions request with the whole trajectory as
a token-id prompt, greedy, `max_tokens` (32), `stop_token_ids` [newline],
`return_token_ids` true and `kv_sharing` the scheme. All requests of one
scheme share one `cache_salt`, so schemes never read each other's cache.

Standard library only (runs under .venv or any python3).

  # start a server yourself ...
  build/agentkv serve --port 8000 --adapter plan=tools/lragent/adapters/plan \\
      --adapter action=tools/lragent/adapters/action --adapter reflect=tools/lragent/adapters/reflect
  python3 tools/lragent/eval_pipeline.py --url http://127.0.0.1:8000 --schemes none --base
  # ... or let the script start one on a free port (and stop it)
  python3 tools/lragent/eval_pipeline.py --serve --schemes none,full,lragent-base,lragent-baselr --base --out /tmp/lra.json
"""
import argparse
import concurrent.futures as cf
import contextlib
import json
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import task  # noqa: E402

BASE = "__base__"  # stands for "no model field": the base model


class HttpError(Exception):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


def post(url, path, body, timeout=600):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise HttpError(e.code, e.read().decode(errors="replace")) from None


def tokenize(url, text):
    return post(url, "/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]


class Pipeline:
    def __init__(self, url, models, max_tokens, newline_id, label_ids):
        self.url = url
        self.labels = label_ids       # role -> token ids of its line label
        self.models = models          # role -> served model name or BASE
        self.max_tokens = max_tokens
        self.nl = newline_id
        self.fallback_used = False
        self.lock = threading.Lock()

    def step(self, ids, role, scheme, salt):
        body = {"prompt": ids, "max_tokens": self.max_tokens, "temperature": 0,
                "stop_token_ids": [self.nl], "return_token_ids": True,
                "kv_sharing": scheme, "cache_salt": salt}
        if self.models[role] != BASE:
            body["model"] = self.models[role]
        r = post(self.url, "/v1/completions", body)
        ch = r["choices"][0]
        out = ch.get("token_ids")
        if out is None:
            # Fallback for a server without `return_token_ids` (vLLM's
            # extension): re-tokenize the generated text. This can differ from
            # the ids the model produced (BPE merges), which is exactly the
            # pitfall the ids avoid; say so in the results.
            with self.lock:
                self.fallback_used = True
            out = tokenize(self.url, ch["text"]) if ch["text"] else []
        # The stop token is never emitted; drop it if a server returns it.
        if out and out[-1] == self.nl:
            out = out[:-1]
        return list(out), ch["text"], ch.get("finish_reason"), r.get("usage", {})

    def run(self, inst, context_ids, scheme, salt):
        ids = list(context_ids)
        lines = []
        cached = 0
        for role in task.ROLE_SEQUENCE:
            ids += self.labels[role]  # the controller's label, then the agent's line
            out, text, finish, usage = self.step(ids, role, scheme, salt)
            ids += out + [self.nl]
            lines.append({"role": role, "text": task.LABELS[role] + text, "finish": finish, "n": len(out)})
            cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0
        gold = [l for _, l in task.gold_lines(inst)]
        hops = [task.normalize(lines[i]["text"]) == task.normalize(gold[i]) for i in range(len(gold))]
        return {
            "index": inst["index"],
            "answer": inst["answer"],
            "final": lines[-1]["text"],
            "correct": task.is_correct(inst, lines[-1]["text"]),
            "lines_exact": hops,
            "lines": lines,
            "tokens": len(ids),
            "cached_tokens": cached,
        }


    def run_direct(self, inst, context_ids, scheme, salt):
        """No pipeline: the base model answers the question in one go (up to
        max_tokens, until end of turn). Lenient: correct when the output names
        the right country and no other country of the records."""
        body = {"prompt": list(context_ids), "max_tokens": self.max_tokens, "temperature": 0,
                "kv_sharing": scheme, "cache_salt": salt}
        text = post(self.url, "/v1/completions", body)["choices"][0]["text"]
        words = set(task.normalize(text).split())
        others = set(task.normalize(k) for k in inst["city_country"].values()) - {task.normalize(inst["answer"])}
        ok = task.normalize(inst["answer"]) in words and not (words & others)
        return {"index": inst["index"], "answer": inst["answer"], "final": text, "correct": ok,
                "lines_exact": [False] * len(task.ROLE_SEQUENCE), "lines": [{"role": "base", "text": text,
                                                                              "finish": None, "n": 0}],
                "tokens": len(context_ids), "cached_tokens": 0}


def evaluate(pipe, insts, contexts, scheme, salt, concurrency, label, direct=False):
    t0 = time.time()
    results = [None] * len(insts)
    fn = pipe.run_direct if direct else pipe.run
    with cf.ThreadPoolExecutor(concurrency) as ex:
        futs = {ex.submit(fn, inst, ctx, scheme, salt): i for i, (inst, ctx) in enumerate(zip(insts, contexts))}
        done = 0
        for f in cf.as_completed(futs):
            results[futs[f]] = f.result()
            done += 1
            if done % 50 == 0 or done == len(insts):
                acc = 100.0 * sum(r["correct"] for r in results if r) / done
                print(f"[eval] {label}: {done}/{len(insts)} acc {acc:.1f}% {time.time() - t0:.0f}s",
                      file=sys.stderr, flush=True)
    n = len(results)
    line_acc = [100.0 * sum(r["lines_exact"][i] for r in results) / n for i in range(len(task.ROLE_SEQUENCE))]
    return {
        "accuracy": 100.0 * sum(r["correct"] for r in results) / n,
        "questions": n,
        "line_exact_pct": line_acc,
        "mean_tokens": sum(r["tokens"] for r in results) / n,
        "cached_tokens": sum(r["cached_tokens"] for r in results),
        "seconds": time.time() - t0,
        "results": results,
    }


def start_server(args):
    cmd = [str(args.engine), "serve", "--port", "0", "--threads", str(args.threads)]
    ad = Path(args.adapters)
    for name in ("plan", "action", "reflect"):
        if (ad / name).is_dir():
            cmd += ["--adapter", f"{name}={ad / name}"]
    if (ad / "icarus_reflect").is_dir():
        cmd += ["--adapter", f"icarus_reflect={ad / 'icarus_reflect'}:icarus"]
    cmd += args.serve_args.split()
    print("[eval] starting: " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port = None
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                raise SystemExit(f"server exited with {proc.returncode}")
            continue
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            port = m.group(1)
            break
    if port is None:
        proc.kill()
        raise SystemExit("server did not start")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # drain
    return proc, port.rstrip("/")


def add_server_args(ap):
    """The flags that say which server to use (server_url)."""
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--serve", action="store_true", help="start build/agentkv serve on a free port with the adapters")
    ap.add_argument("--engine", default=str(ROOT / "build" / "agentkv"))
    ap.add_argument("--adapters", default=str(HERE / "adapters"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--serve-args", default="", help="more flags for serve (with --serve)")


@contextlib.contextmanager
def server_url(args):
    """The server's URL: --url, or (--serve) a server started for the block
    and stopped after it."""
    if not args.serve:
        yield args.url.rstrip("/")
        return
    proc, url = start_server(args)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def newline_id(url):
    nl = tokenize(url, "\n")
    if len(nl) != 1:
        raise SystemExit(f"newline tokenizes to {nl}, expected one token")
    return nl[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_server_args(ap)
    ap.add_argument("--n", type=int, default=200, help="questions")
    ap.add_argument("--seed", type=int, default=0, help="task seed (training used 1, 101, 201)")
    ap.add_argument("--start", type=int, default=0, help="first question index")
    ap.add_argument("--people", type=int, default=3, help="people per instance (task.make_instance)")
    ap.add_argument("--cities", type=int, default=6, help="cities (and countries) per instance")
    ap.add_argument("--shots", type=int, default=0,
                    help="worked examples before each question (task.context_text); the adapters' training used the same")
    ap.add_argument("--schemes", default="none", help="comma list of kv_sharing schemes")
    ap.add_argument("--scheme-json", action="append", default=[], metavar="JSON",
                    help='a kv_sharing object, e.g. \'{"scheme": "droidspeak", "critical_layers": [0, 5, 9]}\' '
                         "(repeatable; runs after --schemes)")
    ap.add_argument("--base", action="store_true", help="also run every role on the base model (untrained contrast)")
    ap.add_argument("--base-direct", action="store_true",
                    help="also let the base model answer the question directly, no pipeline (lenient scoring)")
    ap.add_argument("--no-adapters", action="store_true", help="only the --base runs")
    ap.add_argument("--plan-model", default="plan")
    ap.add_argument("--action-model", default="action")
    ap.add_argument("--reflect-model", default="reflect",
                    help="e.g. icarus_reflect (with --schemes icarus)")
    ap.add_argument("--max-tokens", type=int, default=32, help="per role")
    ap.add_argument("--concurrency", type=int, default=8, help="questions in flight")
    ap.add_argument("--show", type=int, default=0, help="print the first N trajectories of each run")
    ap.add_argument("--out", help="write the results as JSON")
    args = ap.parse_args(argv)

    with server_url(args) as url:
        nl = newline_id(url)
        insts = [task.make_instance(args.seed, i, n_people=args.people, n_cities=args.cities)
                 for i in range(args.start, args.start + args.n)]
        contexts = [tokenize(url, task.context_text(inst, args.shots)) for inst in insts]
        labels = {r: tokenize(url, task.LABELS[r]) for r in task.ROLES}
        runs = []
        adapted = {"plan": args.plan_model, "action": args.action_model, "reflect": args.reflect_model}
        if not args.no_adapters:
            for s in args.schemes.split(","):
                if s.strip():
                    runs.append((s.strip(), adapted, s.strip()))
            for js in args.scheme_json:
                obj = json.loads(js)
                runs.append((obj, adapted, json.dumps(obj, separators=(",", ":"))))
        if args.base:
            runs.append(("none", {r: BASE for r in task.ROLES}, "base (untrained)"))
        if args.base_direct:
            runs.append(("none", {r: BASE for r in task.ROLES}, "base direct answer (untrained)"))
        rows = []
        out = {"url": url, "seed": args.seed, "start": args.start, "n": args.n, "shots": args.shots, "newline_id": nl,
               "label_ids": labels,
               "max_tokens": args.max_tokens, "runs": []}
        fallback = False
        for scheme, models, label in runs:
            pipe = Pipeline(url, models, args.max_tokens, nl, labels)
            salt = "lragent-" + re.sub(r"[^A-Za-z0-9_.-]", "_", label)
            try:
                res = evaluate(pipe, insts, contexts, scheme, salt, args.concurrency, label,
                               direct=label.startswith("base direct"))
            except HttpError as e:
                print(f"[eval] {label}: scheme {scheme!r} failed: {e}", file=sys.stderr, flush=True)
                rows.append((label, scheme, None, args.n, None, f"error: HTTP {e.status}"))
                out["runs"].append({"label": label, "scheme": scheme, "models": models,
                                    "error": str(e)})
                continue
            fallback |= pipe.fallback_used
            rows.append((label, scheme, res["accuracy"], res["questions"], res["line_exact_pct"], ""))
            out["runs"].append({"label": label, "scheme": scheme, "models": models, **res})
            for r in res["results"][:args.show]:
                print(f"--- q{r['index']} gold {r['answer']!r} correct {r['correct']}")
                for l in r["lines"]:
                    print(f"  {l['role']:8s} {l['text']!r} ({l['finish']})")
        out["token_ids_fallback"] = fallback
        print()
        print("| run | kv_sharing | accuracy (%) | questions | exact lines plan/action/plan/action/reflect (%) |")
        print("|---|---|---|---|---|")
        for label, scheme, acc, n, lines, err in rows:
            acc_s = f"{acc:.1f}" if acc is not None else err
            lines_s = " / ".join(f"{x:.0f}" for x in lines) if lines else ""
            name = scheme["scheme"] if isinstance(scheme, dict) else scheme
            print(f"| {label} | {name} | {acc_s} | {n} | {lines_s} |")
        if fallback:
            print("\nnote: the server did not return token_ids; generated text was re-tokenized (/tokenize).")
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
