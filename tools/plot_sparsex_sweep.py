#!/usr/bin/env python3
"""Plots a sparsex parameter sweep from `agentkv bench-fidelity --json-out`.

  tools/plot_sparsex_sweep.py RESULTS.json OUT.png

Rows labelled `sparsex:RATIO:boundary_layer=L` are drawn as one line per
boundary layer L through its ratios: mean KL(full || scheme) against the
reuse rate (share of the prompt's token x layer K/V entries not computed).
Other rows (naive, epic, cacheblend) are single points for reference. Needs
matplotlib (scripts/setup_bench.sh).
"""
import argparse
import collections
import json
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LABEL = re.compile(r"^sparsex:([0-9.]+):boundary_layer=(\d+)$")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results")
    p.add_argument("out")
    a = p.parse_args()
    data = json.load(open(a.results))
    lines = collections.defaultdict(list)
    points = []
    for r in data.get("rows", []):
        m = LABEL.match(r["label"])
        if m:
            lines[int(m.group(2))].append((float(m.group(1)), r))
        elif r["label"] != "full":
            points.append(r)
    if not lines:
        raise SystemExit("no sparsex:RATIO:boundary_layer=L rows in " + a.results)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for layer in sorted(lines):
        pts = sorted(lines[layer], key=lambda t: t[0])
        xs = [100 * r["reuse"] for _, r in pts]
        ys = [r["mean_kl"] for _, r in pts]
        ax.plot(xs, ys, marker="o", label="sparsex, boundary layer %d" % layer)
        for ratio, r in pts:
            ax.annotate("%g" % ratio, (100 * r["reuse"], r["mean_kl"]), textcoords="offset points", xytext=(4, 3),
                        fontsize=7)
    for r in points:
        ax.scatter(100 * r["reuse"], r["mean_kl"], marker="x", color="black")
        ax.annotate(r["label"], (100 * r["reuse"], r["mean_kl"]), textcoords="offset points", xytext=(4, -9),
                    fontsize=8)
    ax.set_xlabel("reuse rate (% of prompt K/V entries not computed)")
    ax.set_ylabel("mean KL(full || scheme), nats")
    ax.set_title("sparsex sweep: %d prompts of %d tokens (labels: ratio)" % (data.get("prompts", 0),
                                                                             data.get("prompt_tokens", 0)))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)


if __name__ == "__main__":
    main()
