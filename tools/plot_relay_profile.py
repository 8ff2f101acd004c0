#!/usr/bin/env python3
"""Plots a relay layer profile from `agentkv profile-relay`.

  tools/plot_relay_profile.py PROFILE.json OUT.png

Top: s_l, the mean V cosine similarity between the upstream agent's
decode-phase K/V and the downstream prompt's full prefill, per layer, with
tau and the recovered baseline of the last T layers (mu - sigma). Bottom:
rho_l, the Spearman correlation of the token deviation rankings of layers l
and l - 1. The chosen l_start, l_det and l_end are marked. Needs matplotlib
(scripts/setup_bench.sh).
"""
import argparse
import json
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("profile")
    p.add_argument("out")
    a = p.parse_args()
    prof = json.load(open(a.profile))
    s = prof["similarity"]
    rho = prof["rho"]
    layers = list(range(len(s)))
    lay = prof["layers"]
    rules = prof["rules"]
    tail = s[-rules["tail_layers"]:]
    base = statistics.fmean(tail) - statistics.pstdev(tail)

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ax1.plot(layers, s, marker="o", ms=3, label="s_l (V similarity)")
    ax1.axhline(rules["tau"], color="gray", ls=":", label=f"tau = {rules['tau']}")
    ax1.axhline(base, color="gray", ls="--", label="mu - sigma of the last T layers")
    ax2.plot([l for l, r in zip(layers, rho) if r is not None], [r for r in rho if r is not None], marker="o", ms=3,
             color="tab:orange", label="rho_l (rank stability)")
    for ax in (ax1, ax2):
        for name, color in (("l_start", "tab:green"), ("l_det", "tab:purple"), ("l_end", "tab:red")):
            if lay[name] < len(s):
                ax.axvline(lay[name], color=color, alpha=0.6, label=name if ax is ax1 else None)
        ax.grid(alpha=0.3)
    ax1.set_ylabel("mean cos(v_decode, v_prefill)")
    ax2.set_ylabel("Spearman rho")
    ax2.set_xlabel("layer")
    cal = prof["calibration"]
    ax1.set_title(f"{prof['model']['name'] or 'model'}: relay profile, {cal['samples']} samples, "
                  f"{cal['tokens']} reused tokens\nband [l_start, l_end) = [{lay['l_start']}, {lay['l_end']}), "
                  f"l_det {lay['l_det']}" + (" (l_end = the layer count)" if lay["l_end"] >= len(s) else ""),
                  fontsize=10)
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)


if __name__ == "__main__":
    main()
