#!/usr/bin/env python3
"""Plots a budget sweep of scripts/bench_agent_tools.py: the paired
session/nosession ratios (tasks/s, and how much lower the p95 TTFT after a
tool is) against --kv-cache-mb, with the min-max over repetitions and the
issue's bar (1.5x and 2x).

Each LOG is the stdout of one or more bench runs (one per budget) with modes
nosession and session; the budget is read from each run's header line and
the ratios from its "paired per repetition" line. One series per LOG.

  tools/plot_sessions_sweep.py --out sweep.png "16 agents=run16.log" "64 agents=run64.log"

Needs matplotlib (.venv-bench has it).
"""
import argparse
import re
import sys

HEADER = re.compile(r"--kv-cache-mb (\d+)")
PAIRED = re.compile(r"tasks/s ([\d.]+)x \(([\d.]+)-([\d.]+)\), p95 TTFT after a tool ([\d.]+)x lower "
                    r"\(([\d.]+)-([\d.]+)\)")


def read_sweep(path):
    """[(mb, (tasks median, lo, hi), (p95 median, lo, hi))] in file order."""
    out, mb = [], None
    with open(path) as f:
        for line in f:
            h = HEADER.search(line)
            if h and "agents x" in line:
                mb = int(h.group(1))
            p = PAIRED.search(line)
            if p and mb is not None:
                v = [float(x) for x in p.groups()]
                out.append((mb, tuple(v[0:3]), tuple(v[3:6])))
                mb = None
    if not out:
        sys.exit(f"{path}: no paired session/nosession result found")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("logs", nargs="+", metavar="LABEL=LOG")
    ap.add_argument("--out", required=True, help="PNG to write")
    args = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    titles = ("completed tasks/s, session / no session", "p95 TTFT after a tool, lower by")
    bars = (1.5, 2.0)
    for spec in args.logs:
        label, _, path = spec.partition("=")
        if not path:
            sys.exit(f"{spec}: expected LABEL=LOG")
        rows = read_sweep(path)
        mbs = [r[0] for r in rows]
        for k, ax in enumerate(axes):
            med = [r[1 + k][0] for r in rows]
            lo = [r[1 + k][0] - r[1 + k][1] for r in rows]
            hi = [r[1 + k][2] - r[1 + k][0] for r in rows]
            ax.errorbar(mbs, med, yerr=[lo, hi], marker="o", capsize=3, label=label)
    for ax, title, bar in zip(axes, titles, bars):
        ax.axhline(bar, color="grey", linestyle="--", linewidth=1, label=f"bar {bar}x")
        ax.axhline(1.0, color="black", linewidth=0.5)
        ax.set_xlabel("--kv-cache-mb")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
