#!/usr/bin/env python3
"""Plots `agentkv bench-relay --json-out` results for docs/benchmarks.md.

  tools/plot_relay_chain.py RESULTS.json OUT.png

By the file's workload:
  ttft-chain       left: median TTFT per downstream agent, one line per
                   scheme (the paper's Table 2); right: the reuse rate per agent.
  context-scaling  left: median TTFT of agent 3 against the cumulative output
                   C of agents 1 and 2 (the paper's Fig. 8); right: the
                   speed-up over none.
  accuracy-chain   accuracy and reuse rate (agents 2 and 3) per scheme.
Needs matplotlib (scripts/setup_bench.sh).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def by_scheme(cells):
    out = {}
    for c in cells:
        out.setdefault(c["label"], []).append(c)
    for v in out.values():
        v.sort(key=lambda c: c["point"])
    return out


def plot_chain(data, ax1, ax2, xlabel, right):
    for label, cells in by_scheme(data["cells"]).items():
        xs = [c["point"] for c in cells]
        ax1.plot(xs, [1000 * c["ttft_s"] for c in cells], marker="o", label=label)
        if right == "reuse":
            ax2.plot(xs, [100 * c["reuse_rate"] for c in cells], marker="o", label=label)
        else:
            ax2.plot(xs, [c["speedup"] for c in cells], marker="o", label=label)
    ax1.set_xlabel(xlabel)
    ax1.set_ylabel("TTFT, ms (median)")
    ax2.set_xlabel(xlabel)
    ax2.set_ylabel("reuse rate (%)" if right == "reuse" else "TTFT speed-up over none (x)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results")
    p.add_argument("out")
    a = p.parse_args()
    data = json.load(open(a.results))
    w = data.get("workload")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    if w == "ttft-chain":
        plot_chain(data, ax1, ax2, "agent", "reuse")
        ax2.set_ylim(0, 100)
        fig.suptitle("ttft-chain: first prompt %d tokens, %d tokens per agent, %d reps"
                     % (data["prompt_tokens"], data["gen_tokens"], data["reps"]))
        ax1.set_xticks(sorted({c["point"] for c in data["cells"]}))
        ax2.set_xticks(sorted({c["point"] for c in data["cells"]}))
    elif w == "context-scaling":
        plot_chain(data, ax1, ax2, "cumulative output C of agents 1 and 2 (tokens)", "speedup")
        fig.suptitle("context-scaling: TTFT of agent 3, first prompt %d tokens, %d reps"
                     % (data["prompt_tokens"], data["reps"]))
    elif w == "accuracy-chain":
        rows = data["rows"]
        x = range(len(rows))
        ax1.bar(list(x), [100 * r["accuracy"] for r in rows])
        ax1.axhline(100.0 / data["records"], color="gray", ls="--", lw=1, label="chance (1 / records)")
        ax1.set_ylabel("accuracy (%)")
        ax1.set_ylim(0, 100)
        ax1.legend(fontsize=8)
        ax2.bar(list(x), [100 * r["reuse_rate"] for r in rows], color="tab:orange")
        ax2.set_ylabel("reuse rate, agents 2-3 (%)")
        ax2.set_ylim(0, 100)
        for ax in (ax1, ax2):
            ax.set_xticks(list(x))
            ax.set_xticklabels([r["label"] for r in rows], rotation=20, fontsize=8)
            ax.grid(alpha=0.3, axis="y")
        fig.suptitle("accuracy-chain: %d instances, %d records, <= %d tokens per agent"
                     % (data["instances"], data["records"], data["gen_tokens"]))
    else:
        raise SystemExit("unknown workload %r in %s" % (w, a.results))
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)


if __name__ == "__main__":
    main()
