#!/usr/bin/env python3
"""Schemes compared at matched compute, from `agentkv bench-fidelity
--json-out` sweeps (scripts/bench_fidelity_pareto.sh runs them).

  tools/fidelity_pareto.py RESULTS.json [MORE.json ...] [--at 0.1,0.2,0.4]
                           [--plot OUT_PREFIX] [--boot 1000] [--seed 1]

Each row of a task is one setting of one scheme (the label's part before
the first ':'): its compute is the share of the prompt's token x layer K/V
entries it computed (1 - reuse), its cost the mean KL(full || scheme) over
the generated positions. A scheme's curve is its front: the lower convex
hull of its settings and of full recomputation (compute 1, KL 0). Its KL at
compute c is read on that hull, linearly between the two settings around c:
the point a server reaches by running one on part of the requests and the
other on the rest (any scheme can recompute a share of its requests in
full). Nothing is extrapolated below the cheapest setting.

For every pair of schemes and every level of --at that both fronts span,
the table gives the ratio KL(A) / KL(B) at that compute, with a 95%
interval from a paired bootstrap over prompts (every scheme ran on the same
prompts: one resample of prompt indexes serves every setting, and the
fronts are rebuilt on it). "A below B" is said only where the interval lies
below 1, "B below A" only where it lies above 1; otherwise "not separated".

Rows need the per-prompt "kls" and "reuses" that bench-fidelity writes
since 2026-11-27. Files are pooled by task and label (other seeds). With
--plot, one PNG per task (OUT_PREFIX-TASK.png) needs matplotlib
(scripts/setup_bench.sh's .venv-bench); the tables need only Python.
"""
import argparse
import json
import math
import random
import sys
from collections import OrderedDict

KL_FLOOR = 1e-7  # an exact setting's KL of 0 is drawn, and divided by, at this floor


def load(paths):
    """task -> label -> {"kls": [...], "reuses": [...]} pooled over files."""
    tasks = OrderedDict()
    for path in paths:
        for r in json.load(open(path)).get("rows", []):
            if r.get("task") == "average" or r.get("label") == "full":
                continue
            if "kls" not in r or "reuses" not in r:
                raise SystemExit(f"{path}: row {r.get('label')} has no per-prompt kls/reuses "
                                 "(written before bench-fidelity kept them; rerun it)")
            if len(r["kls"]) != len(r["reuses"]):
                raise SystemExit(f"{path}: row {r['label']}: {len(r['kls'])} kls against {len(r['reuses'])} reuses")
            d = tasks.setdefault(r["task"], OrderedDict()).setdefault(r["label"], {"kls": [], "reuses": []})
            d["kls"] += r["kls"]
            d["reuses"] += r["reuses"]
    for task, labels in tasks.items():
        sizes = {len(d["kls"]) for d in labels.values()}
        if len(sizes) != 1:
            raise SystemExit(f"{task}: settings ran on different prompt counts {sorted(sizes)}: not paired")
    return tasks


def scheme_of(label):
    return label.split(":", 1)[0]


def points(labels, idx):
    """scheme -> [(compute, kl, label)] over the prompt indexes idx."""
    out = OrderedDict()
    n = len(idx)
    for label, d in labels.items():
        kl = sum(d["kls"][i] for i in idx) / n
        compute = 1.0 - sum(d["reuses"][i] for i in idx) / n
        out.setdefault(scheme_of(label), []).append((compute, kl, label))
    return out


def front(pts):
    """A scheme's front: the lower convex hull of its (compute, kl, label)
    settings and of full recomputation (1, 0), by rising compute. Every point
    on it is reachable by mixing two settings over requests (full included:
    any scheme can recompute a share of its requests), and every setting
    above it is beaten by such a mix."""
    best = []
    for c, k, label in sorted(list(pts) + [(1.0, 0.0, "full")], key=lambda p: (p[0], p[1])):
        if best and k >= best[-1][1]:
            continue  # dominated: more compute, no lower KL
        # Drop the last point while it lies on or above the chord to this one.
        while len(best) >= 2:
            (c0, k0, _), (c1, k1, _) = best[-2], best[-1]
            if (k1 - k0) * (c - c0) >= (k - k0) * (c1 - c0):
                best.pop()
            else:
                break
        best.append((c, k, label))
    return best


def kl_at(fr, c):
    """The front's KL at compute c (linear between settings: a mix of the two
    over requests reaches it), or None below its cheapest setting."""
    if not fr or c < fr[0][0]:
        return None
    if c >= fr[-1][0]:
        return fr[-1][1]
    for (c0, k0, _), (c1, k1, _) in zip(fr, fr[1:]):
        if c0 <= c <= c1:
            t = 0.0 if c1 == c0 else (c - c0) / (c1 - c0)
            return k0 + t * (k1 - k0)
    return None


def percentile(xs, q):
    xs = sorted(xs)
    i = q * (len(xs) - 1)
    lo = int(math.floor(i))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (i - lo) * (xs[hi] - xs[lo])


def compare(labels, levels, boot, seed):
    """[(level, A, B, ratio, lo, hi)] for every pair that both fronts span."""
    n = len(next(iter(labels.values()))["kls"])
    base = {s: front(p) for s, p in points(labels, range(n)).items()}
    schemes = list(base)
    rng = random.Random(seed)
    samples = []
    for _ in range(boot):
        idx = [rng.randrange(n) for _ in range(n)]
        samples.append({s: front(p) for s, p in points(labels, idx).items()})
    rows = []
    for c in levels:
        for i, a in enumerate(schemes):
            for b in schemes[i + 1:]:
                ka, kb = kl_at(base[a], c), kl_at(base[b], c)
                if ka is None or kb is None:
                    continue
                ratios = []
                for s in samples:
                    x, y = kl_at(s[a], c), kl_at(s[b], c)
                    if x is not None and y is not None:
                        ratios.append(max(x, KL_FLOOR) / max(y, KL_FLOOR))
                if len(ratios) < boot // 2:
                    continue  # the level falls outside most resamples' fronts
                rows.append((c, a, b, max(ka, KL_FLOOR) / max(kb, KL_FLOOR), percentile(ratios, 0.025),
                             percentile(ratios, 0.975)))
    return base, rows


def verdict(a, b, lo, hi):
    if hi < 1:
        return f"{a} below {b}"
    if lo > 1:
        return f"{b} below {a}"
    return "not separated"


def plot(task, base, labels, prefix):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(next(iter(labels.values()))["kls"])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for scheme, pts in points(labels, range(n)).items():
        line = ax.plot([p[0] for p in base[scheme]], [p[1] for p in base[scheme]], "-", label=scheme)[0]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", color=line.get_color(), alpha=0.6)
    ax.set_ylim(bottom=0)  # linear: the front's segments are mixes, straight only on a linear axis
    ax.set_xlabel("share of prompt K/V entries computed (1 - reuse)")
    ax.set_ylabel("mean KL(full || scheme), generated positions")
    ax.set_title(f"{task}: {n} prompts; lines: each scheme's front (hull with full recomputation)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    out = f"{prefix}-{task}.png"
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+")
    p.add_argument("--at", default="0.1,0.2,0.4", help="compute shares to compare at, comma-separated")
    p.add_argument("--boot", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--plot", metavar="OUT_PREFIX", help="write OUT_PREFIX-TASK.png per task (matplotlib)")
    a = p.parse_args()
    try:
        levels = [float(x) for x in a.at.split(",") if x]
    except ValueError:
        raise SystemExit(f"--at takes numbers separated by commas; got {a.at!r}")
    if a.boot < 10:
        raise SystemExit("--boot must be at least 10")
    tasks = load(a.results)
    if not tasks:
        raise SystemExit("no scheme rows in " + ", ".join(a.results))
    for task, labels in tasks.items():
        n = len(next(iter(labels.values()))["kls"])
        base, rows = compare(labels, levels, a.boot, a.seed)
        print(f"\n{task}: {n} prompts, {len(labels)} settings\n")
        print("| scheme | front: compute -> KL (setting) |")
        print("|---|---|")
        for scheme, fr in base.items():
            print(f"| {scheme} | " + ", ".join(f"{c:.3f} -> {k:.3g} ({lab})" for c, k, lab in fr) + " |")
        print()
        print("| compute | A | B | KL(A)/KL(B) | 95% paired interval | verdict |")
        print("|---:|---|---|---:|---|---|")
        for c, sa, sb, r, lo, hi in rows:
            print(f"| {c:g} | {sa} | {sb} | {r:.3g} | [{lo:.3g}, {hi:.3g}] | {verdict(sa, sb, lo, hi)} |")
        if not rows:
            print("| | | | | | no level of --at lies on two fronts |")
        if a.plot:
            print(f"\n![{task}]({plot(task, base, labels, a.plot)})")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
