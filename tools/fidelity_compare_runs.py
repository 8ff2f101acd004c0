#!/usr/bin/env python3
"""Two bench-fidelity runs of the same prompts (same task and seed) in two
settings of the engine, e.g. --act-quant q8 against f32: per scheme, each
run's mean KL, accuracy and reuse rate, and the ratio of B's mean KL to A's
with a paired-bootstrap 95% interval over prompts. The first N prompts of
each run are compared (a seed's first prompts are the same whatever
--prompts was).

  tools/fidelity_compare_runs.py A.json B.json [--task retrieval] [--prompts N] [--names q8,f32]

Standard library only.
"""
import argparse
import json
import random


def rows(path, task):
    return {r["label"]: r for r in json.load(open(path))["rows"] if r["task"] == task}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--task", default="retrieval")
    p.add_argument("--prompts", type=int, help="compare the first N prompts (default: the shorter run's)")
    p.add_argument("--names", default="A,B", help="the two runs' names for the table, comma-separated")
    p.add_argument("--boot", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    na, nb = args.names.split(",")
    A, B = rows(args.a, args.task), rows(args.b, args.task)
    common = [lab for lab in B if lab in A and lab != "full"]
    if not common:
        raise SystemExit(f"no scheme of task {args.task} is in both runs")
    n = args.prompts or min(len(A[common[0]]["kls"]), len(B[common[0]]["kls"]))
    rng = random.Random(args.seed)
    draws = [[rng.randrange(n) for _ in range(n)] for _ in range(args.boot)]
    mean = lambda xs: sum(xs[:n]) / n  # noqa: E731
    print(f"{args.task}: the first {n} prompts; {args.boot} paired bootstrap resamples\n")
    print(f"| scheme | {na} mean KL | {nb} mean KL | {nb} / {na} KL [95%] | {na} accuracy | {nb} accuracy | "
          f"{na} reuse | {nb} reuse |")
    print("|---|---|---|---|---|---|---|---|")
    if "full" in A and "full" in B:
        print(f"| full | 0 | 0 | | {100 * mean(A['full']['scores']):.0f}% | {100 * mean(B['full']['scores']):.0f}% | | |")
    for lab in common:
        ka, kb = A[lab]["kls"], B[lab]["kls"]
        if len(ka) < n or len(kb) < n:
            raise SystemExit(f"{lab}: fewer than {n} prompts")
        r = sorted(sum(kb[i] for i in d) / max(sum(ka[i] for i in d), 1e-300) for d in draws)
        lo, hi = r[int(0.025 * args.boot)], r[min(args.boot - 1, int(0.975 * args.boot))]
        print(f"| {lab} | {mean(ka):.4f} | {mean(kb):.4f} | {sum(kb[:n]) / max(sum(ka[:n]), 1e-300):.2f} "
              f"[{lo:.2f}, {hi:.2f}] | {100 * mean(A[lab]['scores']):.0f}% | {100 * mean(B[lab]['scores']):.0f}% | "
              f"{100 * mean(A[lab]['reuses']):.1f}% | {100 * mean(B[lab]['reuses']):.1f}% |")


if __name__ == "__main__":
    main()
