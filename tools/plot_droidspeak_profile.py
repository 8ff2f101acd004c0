#!/usr/bin/env python3
"""Plots a DroidSpeak profile (agentkv profile-droidspeak) for
docs/benchmarks.md: each layer's sensitivity (mean KL when that one layer's
K/V comes from another agent), the critical layers highlighted.

  tools/plot_droidspeak_profile.py PROFILE.json OUT.png

Needs matplotlib (.venv-bench: scripts/setup_bench.sh).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("profile")
    p.add_argument("out")
    a = p.parse_args()
    prof = json.load(open(a.profile))
    s = prof["sensitivity"]
    crit = set(prof["critical_layers"])
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.bar(range(len(s)), s, color=["tab:red" if i in crit else "tab:blue" for i in range(len(s))])
    ax.set_xlabel("layer")
    ax.set_ylabel("mean KL (one layer's K/V from another agent)")
    cal = prof.get("calibration", {})
    ax.set_title(f"DroidSpeak layer sensitivity, {prof['model'].get('name', '')}\n"
                 f"critical (red): {sorted(crit)}; adapters: {', '.join(cal.get('adapters', []))}", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
