#!/usr/bin/env python3
"""Plots `agentkv bench-fidelity --json-out` results for docs/benchmarks.md.

  tools/plot_fidelity.py RESULTS.json OUT.png

Left: mean KL(full || scheme) against the reuse rate (share of the prompt's
token x layer K/V entries not computed), one point per scheme. Right: TTFT
speed-up over full recomputation and passkey accuracy per scheme. Needs
matplotlib (scripts/setup_bench.sh).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results")
    p.add_argument("out")
    a = p.parse_args()
    data = json.load(open(a.results))
    rows = data.get("rows", [])
    if not rows:
        raise SystemExit("no rows in " + a.results)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for r in rows:
        ax1.scatter(100 * r["reuse"], r["mean_kl"], s=40)
        ax1.annotate(r["label"], (100 * r["reuse"], r["mean_kl"]), textcoords="offset points", xytext=(5, 4),
                     fontsize=8)
    ax1.set_xlabel("reuse rate (% of prompt K/V entries not computed)")
    ax1.set_ylabel("mean KL(full || scheme), nats")
    ax1.set_title("fidelity against reuse")
    ax1.grid(alpha=0.3)
    labels = [r["label"] for r in rows]
    x = range(len(rows))
    ax2.bar([i - 0.2 for i in x], [r["speedup"] for r in rows], width=0.4, label="TTFT speed-up (x)")
    ax2b = ax2.twinx()
    ax2b.bar([i + 0.2 for i in x], [100 * r["accuracy"] for r in rows], width=0.4, color="tab:orange",
             label="passkey accuracy (%)")
    ax2.set_xticks(list(x))
    ax2.set_xticklabels(labels, rotation=20, fontsize=8)
    ax2.set_ylabel("TTFT speed-up over full (x)")
    ax2b.set_ylabel("passkey accuracy (%)")
    ax2b.set_ylim(0, 105)
    ax2.set_title("%d prompts of %d tokens" % (data.get("prompts", 0), data.get("prompt_tokens", 0)))
    h1, l1 = ax2.get_legend_handles_labels()
    h2, l2 = ax2b.get_legend_handles_labels()
    ax2.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)


if __name__ == "__main__":
    main()
