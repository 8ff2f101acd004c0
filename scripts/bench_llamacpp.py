#!/usr/bin/env python3
"""Prefill and decode throughput of llama.cpp (through llama-cpp-python) on the
same GGUF, as the peer numbers for `agentkv bench-forward`.

Same method as bench-forward: random token ids (fixed seed), thread counts
interleaved inside each repetition so machine noise hits all alike, median
(and min/max) tok/s over the repetitions.
  prefill N   evaluate N token ids from an empty KV cache (n_batch = n_ubatch
              = 512, so 512 tokens are one ubatch); only the last position's
              logits are computed, as in `agentkv logits`.
  decode @C   after a C-token prefill, D single-token evaluations; tok/s = D / time.
The KV cache is cleared before every run (llama_cpp.Llama.reset + eval removes
all cached positions), so every run starts from an empty context.

Setup: scripts/setup_bench.sh --python (installs llama-cpp-python into .venv-bench).
  .venv-bench/bin/python scripts/bench_llamacpp.py [-m MODEL] [--threads 1,2]
      [--prompt-lens 512] [--decode-ctx 512] [--decode-tokens 128] [--reps 3]
  .venv-bench/bin/python scripts/bench_llamacpp.py --dump-logits OUT.f32 --tokens 1,2,3
      (llama.cpp's logits, to compare with tools/reference/llama_ref.py --compare OUT.f32)
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DEFAULT_MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=os.environ.get("AGENTKV_MODEL", DEFAULT_MODEL))
    ap.add_argument("--threads", type=ints, default=[1, 2], help="thread counts, interleaved")
    ap.add_argument("--prompt-lens", type=ints, default=[512])
    ap.add_argument("--decode-ctx", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=512, help="n_batch and n_ubatch")
    ap.add_argument("--flash-attn", action="store_true")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dump-logits", metavar="OUT",
                    help="no benchmark: write llama.cpp's final-position logits of --tokens to OUT "
                         "(raw f32 LE), for tools/reference/llama_ref.py --compare")
    ap.add_argument("--tokens", help="comma-separated token ids (with --dump-logits)")
    args = ap.parse_args()

    import llama_cpp
    from llama_cpp import Llama

    if args.dump_logits:
        ids = ints(args.tokens or "")
        if not ids:
            ap.error("--dump-logits needs --tokens")
        llm = Llama(model_path=args.model, n_ctx=(len(ids) + 255) // 256 * 256, n_batch=args.batch,
                    n_ubatch=args.batch, n_threads=1, logits_all=True, verbose=False)
        llm.eval(ids)
        np.asarray(llm.scores[len(ids) - 1], dtype="<f4").tofile(args.dump_logits)
        return 0

    n_ctx = max(max(args.prompt_lens), args.decode_ctx + args.decode_tokens)
    n_ctx = (n_ctx + 255) // 256 * 256
    llms = []
    for t in args.threads:
        print(f"[bench_llamacpp] loading {args.model} with {t} thread(s)", file=sys.stderr)
        llms.append(Llama(model_path=args.model, n_ctx=n_ctx, n_batch=args.batch, n_ubatch=args.batch,
                          n_threads=t, n_threads_batch=t, flash_attn=args.flash_attn, verbose=False))
    n_vocab = llms[0].n_vocab()
    rng = np.random.default_rng(args.seed)
    prompts = {n: rng.integers(0, n_vocab, n).tolist() for n in args.prompt_lens}
    ctx_ids = rng.integers(0, n_vocab, args.decode_ctx).tolist()
    next_ids = rng.integers(0, n_vocab, args.decode_tokens).tolist()

    def timed_eval(llm, chunks):
        t0 = time.perf_counter()
        for c in chunks:
            llm.eval(c)
        llama_cpp.llama_synchronize(llm._ctx.ctx)
        return time.perf_counter() - t0

    # One untimed warm-up per instance (first-touch of the mmap'd weights, buffer allocation).
    for llm in llms:
        llm.reset()
        timed_eval(llm, [prompts[args.prompt_lens[0]]])

    load_before = os.getloadavg()
    tests = [f"prefill {n}" for n in args.prompt_lens] + \
        [f"decode @{args.decode_ctx} ({args.decode_tokens} tokens)"]
    tps = {(name, t): [] for name in tests for t in args.threads}
    for rep in range(args.reps):
        for llm, t in zip(llms, args.threads):
            for n in args.prompt_lens:
                llm.reset()
                dt = timed_eval(llm, [prompts[n]])
                tps[(f"prefill {n}", t)].append(n / dt)
            llm.reset()
            timed_eval(llm, [ctx_ids])
            dt = timed_eval(llm, [[tok] for tok in next_ids])
            tps[(tests[-1], t)].append(args.decode_tokens / dt)
            print(f"[bench_llamacpp] rep {rep + 1}/{args.reps}, {t} thread(s) done", file=sys.stderr)

    load_after = os.getloadavg()
    print(f"model: {args.model}, llama-cpp-python {llama_cpp.__version__}, n_batch=n_ubatch={args.batch}, "
          f"flash_attn={args.flash_attn}, KV f16, {args.reps} reps, median tok/s")
    print(f"load average (1/5/15 min) before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, "
          f"after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}\n")
    print("| test | threads | tok/s (median) | min | max |\n|---|---|---|---|---|")
    for name in tests:
        for t in args.threads:
            v = tps[(name, t)]
            print(f"| {name} | {t} | {statistics.median(v):.1f} | {min(v):.1f} | {max(v):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
