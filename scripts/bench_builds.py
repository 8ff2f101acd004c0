#!/usr/bin/env python3
"""Several agentkv builds on one bench-forward test, rotated round by round.

Each round runs `BIN bench-forward -r 1` once per binary; the order rotates
by one each round, so over a multiple of N rounds (N binaries) every
binary takes every position equally often.
Prints, per binary, the median tok/s and its ratio to the first binary
paired by round: median [min, max] and every round's ratio. Give the same
binary twice (copied to another path) to see the resolution on this
machine: on the 2 vCPU guest of 2026-11-29 two identical binaries read
0.976-0.98 at the median, so a difference under about 3% is not resolved.

  python3 scripts/bench_builds.py /tmp/agentkv_before build/agentkv --rounds 8 \\
      -- --prompt-lens 16 --decode-ctx 2048 --decode-tokens 64

The arguments after `--` go to bench-forward (its --thread-counts takes one
count here; -r is set to 1). --test names the row: 'prefill 512', 'decode
@2048', or 'prefill'/'decode' for the first of that kind; without it, the
decode row when --decode-tokens is given there, else the first prefill.
"""
import argparse
import re
import statistics
import subprocess
import sys

ROW = re.compile(r"^\| (prefill \d+|decode @\d+ \(\d+ tokens\)) \| (\d+) \| ([\d.]+) \|")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("binaries", nargs="+", help="agentkv binaries; ratios are against the first")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--threads", default="1", help="one thread count")
    ap.add_argument("--test", help="the row to read, e.g. 'prefill 512', 'decode @2048' or 'decode' "
                                   "(default: see above)")
    a, rest = ap.parse_known_args()
    rest = [x for x in rest if x != "--"]
    if len(a.binaries) < 2:
        sys.exit("give at least two binaries")
    if a.rounds < 1:
        sys.exit("--rounds: at least 1")
    if not a.threads.isdigit() or int(a.threads) < 1:
        sys.exit(f"--threads {a.threads}: one thread count (compare thread counts in separate runs)")
    test = a.test or ("decode" if "--decode-tokens" in rest else "prefill")
    n = len(a.binaries)
    res = [[] for _ in range(n)]  # by position in the list: a binary may be given twice
    for r in range(a.rounds):
        for i in list(range(n))[r % n:] + list(range(n))[:r % n]:
            b = a.binaries[i]
            print(f"\r[bench_builds] round {r + 1}/{a.rounds}: {b}          ", end="", file=sys.stderr, flush=True)
            p = subprocess.run([b, "bench-forward", "-r", "1", "--thread-counts", a.threads] + rest,
                               capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"\n{b} failed:\n{p.stderr[-2000:]}")
            rows = [m for m in map(ROW.match, p.stdout.splitlines()) if m and m.group(2) == a.threads and
                    (m.group(1).split(" (")[0] == test or (test in ("prefill", "decode") and
                                                           m.group(1).startswith(test + " ")))]
            if not rows:
                sys.exit(f"\n{b}: no '{test}' row in bench-forward's table")
            res[i].append(float(rows[0].group(3)))
    print(file=sys.stderr)
    print(f"test: {rows[0].group(1)}, {a.threads} thread(s), {a.rounds} rotated rounds\n")
    print("| binary | median tok/s | / first, paired: median | min | max | per round |")
    print("|---|---|---|---|---|---|")
    for b, got in zip(a.binaries, res):
        pr = [x / y if y > 0 else float("nan") for x, y in zip(got, res[0])]
        print(f"| {b} | {statistics.median(got):.1f} | {statistics.median(pr):.3f} | {min(pr):.3f} | "
              f"{max(pr):.3f} | {' '.join(f'{x:.3f}' for x in pr)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
