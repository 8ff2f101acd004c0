#!/usr/bin/env python3
"""Accuracy differences against full recomputation, paired by prompt, from
`agentkv bench-fidelity --json-out` files.

  tools/fidelity_paired.py RESULTS.json [RESULTS2.json ...]

Every scheme ran on the same prompts as full recomputation, so the
difference of their per-prompt answer scores is a paired sample: its mean
is the accuracy difference and its standard error is sd / sqrt(n), smaller
than that of two independent accuracies. Several files (other seeds) are
pooled: rows of the same task and label are concatenated. Prints a
Markdown table per task (the `average` rows are the tasks' scores one after
the other) with each scheme's accuracy, its difference from full and a 95%
interval (1.96 standard errors). Standard library only.
"""
import argparse
import json
import math
from collections import OrderedDict


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+")
    a = p.parse_args()
    scores = OrderedDict()  # task -> label -> list of per-prompt scores
    for path in a.results:
        for r in json.load(open(path)).get("rows", []):
            if "scores" not in r:
                raise SystemExit(path + ": rows without per-prompt scores (written before bench-fidelity kept them)")
            scores.setdefault(r["task"], OrderedDict()).setdefault(r["label"], []).extend(r["scores"])
    for task, rows in scores.items():
        full = rows.get("full")
        if full is None:
            continue
        print(f"\n{task}: {len(full)} prompts\n")
        print("| scheme | accuracy | minus full | 95% interval of the difference |")
        print("|---|---|---|---|")
        print(f"| full | {100 * sum(full) / len(full):.1f}% | | |")
        for label, s in rows.items():
            if label == "full":
                continue
            if len(s) != len(full):
                raise SystemExit(f"{task}/{label}: {len(s)} prompts against full's {len(full)}")
            d = [x - y for x, y in zip(s, full)]
            n = len(d)
            mean = sum(d) / n
            sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) if n > 1 else 0.0
            half = 1.96 * sd / math.sqrt(n)
            print(f"| {label} | {100 * sum(s) / n:.1f}% | {100 * mean:+.1f} | [{100 * (mean - half):+.1f}, "
                  f"{100 * (mean + half):+.1f}] |")


if __name__ == "__main__":
    main()
