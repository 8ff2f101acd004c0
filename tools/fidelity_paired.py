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

  tools/fidelity_paired.py --kl-base LABEL RESULTS.json ...

also prints, per task, each scheme's mean KL and reuse rate with the ratio
of its mean KL to LABEL's, and a 95% interval from a paired bootstrap over
prompts (--boot resamples): the comparison of two settings of one scheme
whose accuracies are too close to tell apart.

  tools/fidelity_paired.py --acc-base LABEL RESULTS.json ...

also prints, per task, each scheme's accuracy difference from LABEL's
(instead of full's), paired by prompt the same way: whether a variant
changes a scheme's accuracy.
"""
import argparse
import json
import math
import random
from collections import OrderedDict


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+")
    p.add_argument("--kl-base", help="a scheme label: also the KL ratios of every scheme to its, paired")
    p.add_argument("--acc-base", help="a scheme label: also the accuracy differences from its, paired")
    p.add_argument("--boot", type=int, default=2000, help="bootstrap resamples of --kl-base (default 2000)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    scores = OrderedDict()  # task -> label -> list of per-prompt scores
    kls = OrderedDict()  # task -> label -> (per-prompt KLs, per-prompt reuse)
    for path in a.results:
        for r in json.load(open(path)).get("rows", []):
            if "scores" not in r:
                raise SystemExit(path + ": rows without per-prompt scores (written before bench-fidelity kept them)")
            scores.setdefault(r["task"], OrderedDict()).setdefault(r["label"], []).extend(r["scores"])
            k = kls.setdefault(r["task"], OrderedDict()).setdefault(r["label"], ([], []))
            k[0].extend(r.get("kls", []))
            k[1].extend(r.get("reuses", []))
    for task, rows in scores.items():
        full = rows.get("full")
        if full is None:
            continue
        print(f"\n{task}: {len(full)} prompts\n")
        acc_table(task, rows, "full")
        if a.acc_base:
            if a.acc_base not in rows:
                raise SystemExit(f"{task}: no scheme labelled {a.acc_base!r} (have: {', '.join(rows)})")
            print(f"\n{task}: accuracy against {a.acc_base}\n")
            acc_table(task, rows, a.acc_base)
        if a.kl_base:
            kl_table(task, kls[task], a.kl_base, a.boot, a.seed)


def acc_table(task, rows, base):
    """Each scheme's accuracy and its paired difference from `base`'s, with a
    95% interval (1.96 standard errors of the per-prompt differences)."""
    ref = rows[base]
    print(f"| scheme | accuracy | minus {base} | 95% interval of the difference |")
    print("|---|---|---|---|")
    print(f"| {base} | {100 * sum(ref) / len(ref):.1f}% | | |")
    for label, s in rows.items():
        if label == base:
            continue
        if len(s) != len(ref):
            raise SystemExit(f"{task}/{label}: {len(s)} prompts against {base}'s {len(ref)}")
        d = [x - y for x, y in zip(s, ref)]
        n = len(d)
        mean = sum(d) / n
        sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) if n > 1 else 0.0
        half = 1.96 * sd / math.sqrt(n)
        print(f"| {label} | {100 * sum(s) / n:.1f}% | {100 * mean:+.1f} | [{100 * (mean - half):+.1f}, "
              f"{100 * (mean + half):+.1f}] |")


def kl_table(task, rows, base, boot, seed):
    """Mean KL and reuse per scheme, and the paired-bootstrap ratio of mean
    KLs to `base`'s."""
    if base not in rows:
        raise SystemExit(f"{task}: no scheme labelled {base!r} (have: {', '.join(rows)})")
    b = rows[base][0]
    n = len(b)
    rng = random.Random(seed)
    draws = [[rng.randrange(n) for _ in range(n)] for _ in range(boot)]
    print(f"\n{task}: mean KL against {base}, {n} prompts, {boot} paired bootstrap resamples\n")
    print(f"| scheme | mean KL | reuse rate | KL / {base}'s [95%] |")
    print("|---|---|---|---|")
    for label, (k, reuse) in rows.items():
        if label == "full" or not k:
            continue
        if len(k) != n:
            raise SystemExit(f"{task}/{label}: {len(k)} prompts against {base}'s {n}")
        mean_reuse = 100 * sum(reuse) / len(reuse) if reuse else 0.0
        if label == base:
            print(f"| {label} | {sum(k) / n:.4f} | {mean_reuse:.1f}% | 1 |")
            continue
        ratios = sorted(sum(k[i] for i in d) / max(sum(b[i] for i in d), 1e-300) for d in draws)
        lo, hi = ratios[int(0.025 * boot)], ratios[min(boot - 1, int(0.975 * boot))]
        print(f"| {label} | {sum(k) / n:.4f} | {mean_reuse:.1f}% | {sum(k) / max(sum(b), 1e-300):.2f} "
              f"[{lo:.2f}, {hi:.2f}] |")


if __name__ == "__main__":
    main()
