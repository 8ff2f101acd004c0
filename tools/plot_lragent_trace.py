#!/usr/bin/env python3
"""Plots `agentkv bench-agents --workload lragent-trace --json-out` results
for docs/benchmarks.md: per scheme against L_ctx, the TTFT sum, throughput
and peak K/V + LR bytes, each relative to `none` (medians over repetitions),
beside the trace's token bound (none's prefill rows / lragent-baselr's).

  tools/plot_lragent_trace.py RESULTS.json [MORE.json ...] OUT.png

Several JSON files are merged (e.g. a sweep and a longer run at one L_ctx).
Needs matplotlib (.venv-bench: scripts/setup_bench.sh).
"""
import argparse
import json
import statistics
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+")
    a = p.parse_args()
    *inputs, out = a.results
    if not inputs:
        raise SystemExit("give at least one RESULTS.json and the OUT.png")
    rows = []
    for path in inputs:
        rows += json.load(open(path)).get("lragent_trace", [])
    if not rows:
        raise SystemExit("no lragent-trace results in " + ", ".join(inputs))
    by = defaultdict(list)
    for r in rows:
        by[(r["ctx_len"], r["scheme"])].append(r)
    lens = sorted({r["ctx_len"] for r in rows})
    schemes = [s for s in dict.fromkeys(r["scheme"] for r in rows) if s != "none"]

    def med(L, s, key):
        v = [r[key] for r in by.get((L, s), [])]
        return statistics.median(v) if v else None

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    panels = [("ttft_sum_s", "TTFT sum: none / scheme", True), ("throughput", "throughput: scheme / none", False),
              ("peak_kv_bytes", "peak K/V + LR bytes: scheme / none", False)]
    for ax, (key, title, inverse) in zip(axes, panels):
        for s in schemes:
            xs, ys = [], []
            for L in lens:
                m, n = med(L, s, key), med(L, "none", key)
                if m is None or n is None or m == 0:
                    continue
                xs.append(L)
                ys.append(n / m if inverse else m / n)
            ax.plot(xs, ys, marker="o", label=s)
        if key == "ttft_sum_s":
            bound = [med(L, "none", "computed_rows") / med(L, "lragent-baselr", "computed_rows")
                     for L in lens if med(L, "lragent-baselr", "computed_rows")]
            ax.plot(lens[:len(bound)], bound, "k--", label="token bound")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("L_ctx (trajectory = 912 + 4 L_ctx tokens)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("LRAgent trace (App. C.5) on SmolLM2-135M, 3 role adapters, CPU")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote", out)


if __name__ == "__main__":
    main()
