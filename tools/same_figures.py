#!/usr/bin/env python3
"""Whether two benchmark JSON files (bench-fidelity, bench-agents, bench-relay
--json-out) give the same figures, timing aside: every number and string
that is not a time or a speed must be equal, exactly (a refactor that keeps
behaviour bit for bit keeps KL, accuracy, reuse, cached shares and token
counts unchanged). Keys read as timing: ending in _s or _ms, or containing
ttft, tok_s, speed, throughput, seconds or time. Prints each difference;
exit status 1 if any.

  tools/same_figures.py BEFORE.json AFTER.json [--ignore REGEX]

--ignore drops more keys: figures that depend on when the engine thread
saw a request, not on what it computed (icarus-round-robin's peak
kv_blocks: 9 or 10 from run to run of one binary).

Standard library only.
"""
import json
import re
import sys

TIMING = re.compile(r"(_s|_ms)$|ttft|tok_s|speed|throughput|seconds|time|wall|tps", re.I)


def walk(a, b, path, out, ignore=None):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if TIMING.search(k) or (ignore and ignore.search(k)):
                continue
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'after' if k not in a else 'before'}")
                continue
            walk(a[k], b[k], f"{path}/{k}", out, ignore)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} items before, {len(b)} after")
        for i, (x, y) in enumerate(zip(a, b)):
            walk(x, y, f"{path}[{i}]", out, ignore)
    elif a != b:
        out.append(f"{path}: {a!r} before, {b!r} after")


def main(argv):
    ignore = None
    if len(argv) == 5 and argv[3] == "--ignore":
        ignore = re.compile(argv[4])
        argv = argv[:3]
    if len(argv) != 3 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) > 1 and argv[1] in ("-h", "--help") else 2
    diffs = []
    walk(json.load(open(argv[1])), json.load(open(argv[2])), "", diffs, ignore)
    for d in diffs:
        print(d)
    print(f"{argv[1]} against {argv[2]}: {'same figures' if not diffs else f'{len(diffs)} differences'}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
