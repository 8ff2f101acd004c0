#!/usr/bin/env python3
"""Plots `agentkv bench-agents --json-out` results for docs/benchmarks.md.

  tools/plot_bench_agents.py RESULTS.json OUT.png

alora-pipeline: adapter TTFT, adapter end-to-end latency and the base's
second-turn TTFT against the initial prompt length, aLoRA under `alora` vs
LoRA under `none`, and the speed-ups. Needs matplotlib (scripts/setup_bench.sh).
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
    rows = data.get("pipeline", [])
    if not rows:
        raise SystemExit("no alora-pipeline results in " + a.results)
    variants = sorted({r["variant"] for r in rows})
    metrics = [("adapter_ttft_s", "adapter TTFT (s)"), ("adapter_e2e_s", "adapter end-to-end (s)"),
               ("base2_ttft_s", "base 2nd-turn TTFT (s)")]
    fig, axes = plt.subplots(1, len(metrics) + 1, figsize=(16, 3.8))
    for ax, (key, label) in zip(axes, metrics):
        for v in variants:
            pts = sorted((r["prompt_len"], r[key]) for r in rows if r["variant"] == v)
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=v)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("initial prompt length L (tokens)")
        ax.set_title(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    ax = axes[-1]
    by = {(r["prompt_len"], r["variant"]): r for r in rows}
    lens = sorted({r["prompt_len"] for r in rows})
    for key, label in metrics:
        xs, ys = [], []
        for L in lens:
            a_, n_ = by.get((L, "alora")), by.get((L, "lora/none"))
            if a_ and n_ and a_[key] > 0:
                xs.append(L)
                ys.append(n_[key] / a_[key])
        ax.plot(xs, ys, marker="o", label=label.replace(" (s)", ""))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("initial prompt length L (tokens)")
    ax.set_title("speed-up of alora over LoRA/none")
    ax.axhline(10, color="grey", ls="--", lw=0.8)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.suptitle(f"aLoRA pipeline (paper 004 Sec. 4): {data.get('model', '')}, {data.get('threads', '')} threads")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
