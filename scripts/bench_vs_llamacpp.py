#!/usr/bin/env python3
"""agentkv against llama.cpp on the same GGUF and thread counts, interleaved.

Each round runs `agentkv bench-forward -r 1` and then `bench_llamacpp.py
--reps 1` with the same tests (prefill N, decode after a C-token context), so
machine noise hits both alike; the table gives medians over the rounds and
the ratio agentkv / llama.cpp. With --plot, a bar chart of the medians.

Setup: scripts/setup.sh (agentkv) and scripts/setup_bench.sh (llama.cpp).
  .venv-bench/bin/python scripts/bench_vs_llamacpp.py --rounds 5 --plot docs/img/vs_llamacpp.png
"""
import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
ROW = re.compile(r"^\| (prefill \d+|decode @\d+ \(\d+ tokens\)) \| (\d+) \| ([\d.]+) \|")


def parse(out):
    return {(m.group(1), int(m.group(2))): float(m.group(3)) for m in map(ROW.match, out.splitlines()) if m}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr}")
    return parse(r.stdout)


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt-lens", default="512")
    ap.add_argument("--decode-ctx", default="512")
    ap.add_argument("--decode-tokens", default="128")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--agentkv", default=os.path.join(ROOT, "build", "agentkv"))
    ap.add_argument("--plot", help="write a PNG bar chart here")
    a = ap.parse_args()

    common = ["--prompt-lens", a.prompt_lens, "--decode-ctx", a.decode_ctx, "--decode-tokens", a.decode_tokens]
    ours = [a.agentkv, "bench-forward", "-m", a.model, "-r", "1", "--thread-counts", a.threads] + common
    peer = [sys.executable, os.path.join(ROOT, "scripts", "bench_llamacpp.py"), "-m", a.model, "--reps", "1",
            "--threads", a.threads] + common
    res = {"agentkv": {}, "llama.cpp": {}}
    load0 = os.getloadavg()
    for r in range(a.rounds):
        for name, cmd in (("agentkv", ours), ("llama.cpp", peer)) if r % 2 == 0 else (("llama.cpp", peer), ("agentkv", ours)):
            print(f"\r[bench_vs_llamacpp] round {r + 1}/{a.rounds}: {name}      ", end="", file=sys.stderr, flush=True)
            for k, v in run(cmd).items():
                res[name].setdefault(k, []).append(v)
    print(file=sys.stderr)
    load1 = os.getloadavg()

    keys = sorted(res["agentkv"], key=lambda k: (not k[0].startswith("prefill"), int(re.findall(r"\d+", k[0])[0]), k[1]))
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"model: {os.path.relpath(a.model, ROOT)}; {a.rounds} interleaved rounds; load average "
          f"{load0[0]:.2f} before, {load1[0]:.2f} after\n")
    print("| test | threads | agentkv tok/s | llama.cpp tok/s | agentkv / llama.cpp |")
    print("|---|---|---|---|---|")
    meds = {}
    for k in keys:
        m_ours = statistics.median(res["agentkv"][k])
        m_peer = statistics.median(res["llama.cpp"].get(k, [float("nan")]))
        meds[k] = (m_ours, m_peer)
        print(f"| {k[0]} | {k[1]} | {m_ours:.1f} | {m_peer:.1f} | {m_ours / m_peer:.2f}x |")

    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        labels = [f"{k[0].split(' (')[0]}\n{k[1]} thread{'s' if k[1] > 1 else ''}" for k in keys]
        x = range(len(keys))
        fig, ax = plt.subplots(figsize=(1.6 * len(keys) + 2, 4))
        ax.bar([i - 0.2 for i in x], [meds[k][0] for k in keys], 0.4, label="agentkv")
        ax.bar([i + 0.2 for i in x], [meds[k][1] for k in keys], 0.4, label="llama.cpp")
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels)
        ax.set_ylabel("tokens / s (median)")
        ax.set_title(f"SmolLM2-135M Q4_1, CPU ({os.cpu_count()} cores)")
        ax.legend()
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(a.plot)), exist_ok=True)
        fig.savefig(a.plot, dpi=100)
        print(f"\nplot: {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
