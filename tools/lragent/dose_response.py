#!/usr/bin/env python3
"""The LRAgent dose-response table (docs/benchmarks.md, "LRAgent
dose-response"): for each adapter set, the divergence of its roles
(divergence.py --out) beside each scheme's accuracy and its paired loss
against none (eval_pipeline.py --out), with 95% intervals.

  .venv/bin/python tools/lragent/dose_response.py \\
      --set 1e-4=/tmp/lra/eval_1e-4.json,/tmp/lra/div_1e-4.json[,/tmp/lra/kl_1e-4.json] --set 3e-3=...

A third file (kl_vs_none.py --out) adds each scheme's teacher-forced KL
against none.

The paired difference is per question (1 if the scheme is right and none
wrong, -1 the other way, 0 when they agree), its interval the normal
approximation mean +- 1.96 sd / sqrt(n): the questions are the same in
every run, so the pairing removes the questions' own difficulty. Standard
library only."""
import argparse
import json
import math
import sys

SCHEMES = ("lragent-base", "lragent-baselr", "full", "droidspeak")


def paired(a, b):
    """Mean of b - a over the questions (points) and its 95% half-width."""
    d = [int(y) - int(x) for x, y in zip(a, b)]
    n = len(d)
    m = sum(d) / n
    var = sum((x - m) ** 2 for x in d) / (n - 1) if n > 1 else 0.0
    return 100.0 * m, 100.0 * 1.96 * math.sqrt(var / n)


def load_set(spec):
    label, files = spec.split("=", 1)
    parts = files.split(",")
    eval_path, div_path = parts[0], parts[1]
    kl = json.load(open(parts[2]))["schemes"] if len(parts) > 2 else {}
    ev = json.load(open(eval_path))
    runs = {r["label"]: r for r in ev["runs"] if "results" in r}
    div = json.load(open(div_path))
    (name, d), = div["sets"].items()
    pairs = d.get("mean_over_pairs")
    if pairs is None:  # older files: the mean of the four role pairs
        keys = [k for k in d["mean"] if "->" in k]
        pairs = {c: sum(d["mean"][k][c] for k in keys) / len(keys) for c in d["mean"][keys[0]]}
    return label, runs, pairs, kl


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", action="append", required=True, metavar="LABEL=EVAL.json,DIV.json[,KL.json]")
    args = ap.parse_args(argv)
    print("| set | none | base-V cos | full-V cos | K cos | "
          + " | ".join(f"{s} (vs none, points)" for s in SCHEMES) + " |")
    print("|---" * (5 + len(SCHEMES)) + "|")
    for spec in args.set:
        label, runs, div, kl = load_set(spec)
        none = [r["correct"] for r in sorted(runs["none"]["results"], key=lambda r: r["index"])]
        cells = []
        for s in SCHEMES:
            if s not in runs:
                cells.append("not run")
                continue
            got = [r["correct"] for r in sorted(runs[s]["results"], key=lambda r: r["index"])]
            m, h = paired(none, got)
            kl_s = f"; KL {kl[s]['all']['kl']:.3f}" if s in kl else ""
            cells.append(f"{runs[s]['accuracy']:.1f}% ({m:+.1f} [{m - h:+.1f}, {m + h:+.1f}]{kl_s})")
        print(f"| {label} | {runs['none']['accuracy']:.1f}% ({len(none)} q) | {div['Vb_cos']:.3f} | "
              f"{div['V_cos']:.3f} | {div['K_cos']:.3f} | " + " | ".join(cells) + " |")
    print("| paper: Llama-3.1-8B / Ministral-8B | | 0.9726 / 0.9530 | 0.9576 / 0.9200 | 0.9922 / 0.9840 |"
          + " |" * len(SCHEMES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
