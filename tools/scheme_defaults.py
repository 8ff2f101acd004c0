#!/usr/bin/env python3
"""Per-model defaults of the segment-reuse schemes, chosen from a
`bench-fidelity --json-out` run of that model (issue 28, item 4), written as
the file `agentkv serve` loads: found by model id in --profile-dir
(profiles/<model>.defaults.json), or named with --scheme-defaults.

  tools/scheme_defaults.py RESULTS.json [RESULTS2.json ...] --out FILE \\
      [--task retrieval] [--max-loss 5] [--max-kl 0.05] [--command TEXT] [--merge]

The rule (docs/benchmarks.md, "Segment-reuse defaults from a retrieval task
the model solves"): a scheme's default is its cheapest swept setting (the
least K/V computed, 1 - mean reuse rate) whose accuracy is within
--max-loss points of full recomputation (paired per prompt, point estimate)
and whose mean KL against full is at most --max-kl nats. A scheme none of
whose settings qualifies gets no entry (its built-in default applies) and is
listed under "no_setting". Run it on a task that full recomputation solves,
or accuracy says nothing. Several files (other seeds) are pooled by label.
--merge adds this run's schemes to an existing --out file of the same model
(a scheme measured on another task: relay needs decode-phase K/V, which the
retrieval task's documents are not); each entry records its task. Standard
library only.
"""
import argparse
import json
import os
import sys
import time
from collections import OrderedDict

FORMAT = "agentkv-scheme-defaults"


def load(paths, task):
    """label -> row (pooled), the model's id and name, and the task; only
    `task`'s rows (None: the files' one task)."""
    rows, model_id, model = OrderedDict(), None, None
    tasks = set()
    for path in paths:
        j = json.load(open(path))
        if "model_id" not in j:
            sys.exit(f"{path}: no model_id (written by a bench-fidelity before 2026-11-28): rerun it")
        if model_id not in (None, j["model_id"]):
            sys.exit(f"{path}: another model than the files before it")
        model_id, model = j["model_id"], j.get("model", "")
        for r in j.get("rows", []):
            if r.get("task") == "average":
                continue
            tasks.add(r["task"])
            if task is not None and r["task"] != task:
                continue
            if r["label"] != "full" and "kv_sharing" not in r:
                sys.exit(f"{path}: row {r['label']} has no kv_sharing parameters: rerun bench-fidelity")
            d = rows.setdefault(r["label"], {"scores": [], "kls": [], "reuses": [], "kv_sharing": r.get("kv_sharing")})
            for k in ("scores", "kls", "reuses"):
                d[k] += r.get(k, [])
    if task is None and len(tasks) > 1:
        sys.exit(f"several tasks ({', '.join(sorted(tasks))}): name one with --task")
    if "full" not in rows:
        sys.exit("no full recomputation row for the task")
    return rows, model_id, model, task if task is not None else next(iter(tasks))


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def choose(rows, max_loss, max_kl):
    """scheme -> (label, params, compute, kl, loss); schemes with no setting."""
    full = rows["full"]["scores"]
    best, seen = OrderedDict(), OrderedDict()
    for label, r in rows.items():
        if label == "full":
            continue
        scheme = r["kv_sharing"]["scheme"]
        if "+" in scheme:
            # A composition's defaults are its reuse part's, measured alone.
            print(f"skipped {label}: a composition (measure {scheme.split('+')[-1]} alone)", file=sys.stderr)
            continue
        seen[scheme] = True
        if len(r["scores"]) != len(full) or len(r["reuses"]) != len(full):
            sys.exit(f"{label}: {len(r['scores'])} prompts against full's {len(full)}")
        loss = 100.0 * mean([a - b for a, b in zip(r["scores"], full)])  # points, negative = worse
        kl = mean(r["kls"])
        compute = 1.0 - mean(r["reuses"])
        if loss < -max_loss or not kl <= max_kl:
            continue
        # The least compute; on a tie, the lower KL, then the smaller loss.
        if scheme not in best or (compute, kl, -loss) < (best[scheme][2], best[scheme][3], -best[scheme][4]):
            params = {k: v for k, v in r["kv_sharing"].items() if k != "scheme"}
            layers = sorted(set(params) & {"l_start", "l_det", "l_end", "critical_layers"})
            if layers:  # serve refuses them in a defaults file: the profiles give layers
                sys.exit(f"{label}: names layers ({', '.join(layers)}); a defaults file takes them from the "
                         "scheme's profile: sweep the other parameters")
            best[scheme] = (label, params, compute, kl, loss)
    return best, [s for s in seen if s not in best]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", help="bench-fidelity --json-out files of one model")
    p.add_argument("--out", required=True, help="the defaults file to write (profiles/<model>.defaults.json)")
    p.add_argument("--task", help="the task whose rows count (needed when the files hold several)")
    p.add_argument("--max-loss", type=float, default=5.0, help="accuracy points below full allowed (default 5)")
    p.add_argument("--max-kl", type=float, default=0.05, help="mean KL against full allowed, nats (default 0.05)")
    p.add_argument("--command", default="", help="the command that made the results, recorded in the file")
    p.add_argument("--merge", action="store_true",
                   help="add this run's schemes to the existing --out file (same model) instead of replacing it")
    a = p.parse_args(argv)
    if a.max_loss < 0 or a.max_kl < 0:
        p.error("--max-loss and --max-kl are bounds: >= 0")
    rows, model_id, model, task = load(a.results, a.task)
    best, none = choose(rows, a.max_loss, a.max_kl)
    n = len(rows["full"]["scores"])
    rule = {"max_accuracy_loss_points": a.max_loss, "max_mean_kl": a.max_kl,
            "choice": "the least K/V computed among the settings within both bounds"}
    source = {"task": task, "prompts": n, "results": [os.path.basename(x) for x in a.results],
              "command": a.command, "written": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    out = OrderedDict([
        ("format", FORMAT), ("version", 1),
        ("model", {"id": model_id, "name": os.path.splitext(os.path.basename(model))[0]}),
        ("rule", rule), ("sources", [source]), ("schemes", {}), ("chosen", {}), ("no_setting", [])])
    if a.merge and os.path.exists(a.out):
        old = json.load(open(a.out), object_pairs_hook=OrderedDict)
        if old.get("format") != FORMAT or old.get("model", {}).get("id") != model_id:
            sys.exit(f"--merge: {a.out} is not a defaults file of this model ({model_id})")
        if old.get("rule") != rule:
            sys.exit(f"--merge: {a.out} was chosen under another rule ({old.get('rule')})")
        out = old
        out["sources"].append(source)
        for s_ in list(best) + none:
            out["schemes"].pop(s_, None), out["chosen"].pop(s_, None)
            if s_ in out["no_setting"]:
                out["no_setting"].remove(s_)
    for s_, b in best.items():
        out["schemes"][s_] = b[1]
        out["chosen"][s_] = {"label": b[0], "task": task, "prompts": n, "kv_computed": round(b[2], 4),
                             "mean_kl": round(b[3], 4), "accuracy_minus_full_points": round(b[4], 2)}
    out["no_setting"] += none
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(f"| scheme | default (label) | K/V computed | mean KL | accuracy - full (points) |\n|---|---|---|---|---|")
    for s, (label, _, c, kl, loss) in best.items():
        print(f"| {s} | {label} | {c:.3f} | {kl:.4f} | {loss:+.1f} |")
    for s in none:
        print(f"| {s} | none within the bounds (built-in default kept) | | | |")
    print(f"\nwrote {a.out} ({n} prompts, model id {model_id})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
