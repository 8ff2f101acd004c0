#!/usr/bin/env python3
"""Plots `agentkv bench-fidelity --json-out` results for docs/benchmarks.md.

  tools/plot_fidelity.py RESULTS.json OUT.png [--task NAME]

One task's rows (--task; default the first task in the file, or every row
of a file written before rows named their task). Left: mean KL(full ||
scheme) against the reuse rate (share of the prompt's token x layer K/V
entries not computed), one point per scheme. Right: TTFT speed-up over full
recomputation and task accuracy per scheme. Needs matplotlib
(scripts/setup_bench.sh).
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
    p.add_argument("--task", help="task whose rows to plot (passkey, mq-niah, vt, cwe, fwe, chat, agents or average)")
    a = p.parse_args()
    data = json.load(open(a.results))
    rows = data.get("rows", [])
    task = a.task or (data["tasks"][0]["task"] if data.get("tasks") else None)
    prompt_tokens = data.get("prompt_tokens", 0)
    if task is not None:
        rows = [r for r in rows if r.get("task") == task]
        prompt_tokens = next((t["prompt_tokens"] for t in data.get("tasks", []) if t["task"] == task), prompt_tokens)
    if not rows:
        raise SystemExit("no rows in " + a.results + ("" if task is None else " for task " + task))
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
             label="%s accuracy (%%)" % (task or "passkey"))
    ax2.set_xticks(list(x))
    ax2.set_xticklabels(labels, rotation=20, fontsize=8)
    ax2.set_ylabel("TTFT speed-up over full (x)")
    ax2b.set_ylabel("accuracy (%)")
    ax2b.set_ylim(0, 105)
    ax2.set_title("%s%d prompts of %d tokens" % (task + ": " if task else "", data.get("prompts", 0), prompt_tokens))
    h1, l1 = ax2.get_legend_handles_labels()
    h2, l2 = ax2b.get_legend_handles_labels()
    ax2.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)


if __name__ == "__main__":
    main()
