#!/usr/bin/env python3
"""How far apart two role adapters' K/V inputs are on the same context: the
quantity that decides what a shared-K/V scheme loses (README "Gentle
adapters").

For each adapter set and each pair of roles (a = the producer whose K/V a
scheme shares, b = the consumer), both agents run their own plain LoRA
forward (tools/reference/shared_kv_ref.py, float64 numpy, no engine) over the
same gold trajectory of an evaluation instance (seed 0). Per layer l, over all
positions, with ||.|| the Frobenius norm and b's own value as the reference
(what b would have computed itself, i.e. under `none`):

  X        ||X_a - X_b|| / ||X_b||, X = RMSNorm(residual) * attn_norm, the
           hidden state every attention projection reads;
  K        ||K_a - K_b|| / ||K_b|| (base K; no adapter has a k_proj LoRA):
           what every sharing scheme reads in place of b's own K;
  Vb       ||X_a W_v - X_b W_v|| / ||X_b W_v||: base V, BaseShared's error;
  Vb_cos   cosine similarity of the two base V rows, averaged over tokens:
           the paper's Table 1 "base cache" (0.9726 Llama-3.1-8B, 0.9530
           Ministral-8B);
  V_cos    the same for the full V rows (Table 1 "full cache": 0.9576, 0.9200);
  K_cos    the same for the K rows (App. A.3: 0.9922, 0.9840);
  V_full   ||V_a(a) - V_b(b)|| / ||V_b(b)||, V(j) = X W_v + s (X A_v) B_j:
           FullShared's error on V;
  V_baselr ||X_a W_v + s (X_a A_v) B_b - V_b(b)|| / ||V_b(b)||: BaseLRShared's
           error on V (shared A_v, b's own B_v);
and, per adapter, how far it moves the base model:
  X_base   ||X_a - X_base|| / ||X_base|| (X_base: the model without adapter);
  dV       ||s (X_a A_v) B_a|| / ||X_a W_v||: its own LoRA term in V.

Each is averaged over every layer (--layers; the paper's Table 1 and Fig. 7
average all layers; before 2026-11-28 this script skipped layers 0-4) and
over the instances.

  OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python tools/lragent/divergence.py \\
      --sets adapters --n 4 --out /tmp/divergence.json
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tools" / "reference"))

import llama_ref  # noqa: E402
import shared_kv_ref as ref  # noqa: E402
import task  # noqa: E402

PAIRS = [("plan", "action"), ("action", "plan"), ("plan", "reflect"), ("action", "reflect")]


class Recorder:
    """Wraps an Adapter (or None: the base model) for shared_kv_ref's forward
    and keeps X, the normed hidden state the forward hands to the q_proj
    LoRA at every layer."""

    def __init__(self, adapter, n_layer):
        self.adapter = adapter
        self.x = [None] * n_layer

    def delta(self, il, t, X):
        if t == "q":
            self.x[il] = np.array(X)
        return None if self.adapter is None else self.adapter.delta(il, t, X)

    def lr(self, il, X):
        return None if self.adapter is None else self.adapter.lr(il, X)

    def v_up(self, il, lr):
        return self.adapter.v_up(il, lr)


def run_agent(model, adapter, tokens):
    """(per-layer X [T, d], AgentCache with K, Vb, V, LR) of a plain forward."""
    rec = Recorder(adapter, model.hp.n_layer)
    cache = ref.producer(model, rec, tokens)
    return rec.x, cache


def rel(diff, refv):
    return float(np.linalg.norm(diff) / np.linalg.norm(refv))


def cos(a, b):
    """Mean over tokens of the cosine similarity of two [T, n] row sets."""
    num = np.sum(a * b, axis=1)
    return float(np.mean(num / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))


def heads_to_rows(v):
    # [Hkv, T, hd] -> [T, Hkv*hd]
    return v.transpose(1, 0, 2).reshape(v.shape[1], -1)


def pair_metrics(model, ad_b, xa, ca, xb, cb):
    """Per-layer relative differences of producer a's inputs from consumer
    b's own (see the module docstring)."""
    out = {k: [] for k in ("X", "K", "Vb", "V_full", "V_baselr", "Vb_cos", "V_cos", "K_cos")}
    for il in range(model.hp.n_layer):
        out["X"].append(rel(xa[il] - xb[il], xb[il]))
        out["K"].append(rel(ca.k[il] - cb.k[il], cb.k[il]))
        out["Vb"].append(rel(ca.vb[il] - cb.vb[il], cb.vb[il]))
        out["Vb_cos"].append(cos(heads_to_rows(ca.vb[il]), heads_to_rows(cb.vb[il])))
        out["V_cos"].append(cos(heads_to_rows(ca.v[il]), heads_to_rows(cb.v[il])))
        out["K_cos"].append(cos(heads_to_rows(ca.k[il]), heads_to_rows(cb.k[il])))
        out["V_full"].append(rel(ca.v[il] - cb.v[il], cb.v[il]))
        vb_a = heads_to_rows(ca.vb[il])
        v_lr = vb_a + ad_b.v_up(il, ca.lr[il])  # A's base rows and LR rows, B's own B
        out["V_baselr"].append(rel(v_lr - heads_to_rows(cb.v[il]), cb.v[il]))
    return out


def shift_metrics(model, x0, xa, ca):
    out = {"X_base": [], "dV": []}
    for il in range(model.hp.n_layer):
        out["X_base"].append(rel(xa[il] - x0[il], x0[il]))
        out["dV"].append(rel(ca.v[il] - ca.vb[il], ca.vb[il]))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--sets", default="adapters",
                    help="adapter folders (under tools/lragent/ or paths), each with plan/action/reflect")
    ap.add_argument("--n", type=int, default=4, help="evaluation instances (seed --seed, indices 0..n-1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", default="all", help="layers averaged: FIRST-LAST, or all")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--out", help="write everything (per layer too) as JSON")
    args = ap.parse_args(argv)
    dtype = np.float64 if args.dtype == "float64" else np.float32

    t0 = time.time()
    model = llama_ref.Model(args.model, dtype=dtype)
    tok = llama_ref.make_tokenizer(model.reader)
    newline_id = llama_ref.encode(tok, "\n")
    assert len(newline_id) == 1
    newline_id = newline_id[0]
    enc = lambda s: llama_ref.encode(tok, s)  # noqa: E731
    trajs = [task.trajectory_ids(enc, task.make_instance(args.seed, i), newline_id)[0] for i in range(args.n)]
    print(f"[divergence] model load {time.time() - t0:.1f}s; {args.n} trajectories of "
          f"{min(map(len, trajs))}-{max(map(len, trajs))} tokens", file=sys.stderr, flush=True)

    lo, hi = (0, model.hp.n_layer - 1) if args.layers == "all" else (int(s) for s in args.layers.split("-"))
    base = [run_agent(model, None, t)[0] for t in trajs]
    result = {"args": vars(args), "sets": {}}
    for s in args.sets.split(","):
        folder = Path(s) if Path(s).is_dir() else HERE / s
        roles = {r: ref.Adapter(folder / r, model.hp, dtype) for r in ("plan", "action", "reflect")}
        runs = {r: [run_agent(model, ad, t) for t in trajs] for r, ad in roles.items()}
        per_layer = {}
        for a, b in PAIRS:
            acc = None
            for i in range(args.n):
                m = pair_metrics(model, roles[b], *runs[a][i], *runs[b][i])
                acc = m if acc is None else {k: [x + y for x, y in zip(acc[k], m[k])] for k in acc}
            per_layer[f"{a}->{b}"] = {k: [x / args.n for x in v] for k, v in acc.items()}
        for r in roles:
            acc = None
            for i in range(args.n):
                m = shift_metrics(model, base[i], *runs[r][i])
                acc = m if acc is None else {k: [x + y for x, y in zip(acc[k], m[k])] for k in acc}
            per_layer[r] = {k: [x / args.n for x in v] for k, v in acc.items()}
        mean = {name: {k: float(np.mean(v[lo:hi + 1])) for k, v in d.items()} for name, d in per_layer.items()}
        result["sets"][s] = {"mean": mean, "per_layer": per_layer}
        print(f"[divergence] {s} done at {time.time() - t0:.0f}s", file=sys.stderr, flush=True)

    for s, d in result["sets"].items():
        print(f"\n{s}: relative difference, mean over layers {lo}-{hi}, {args.n} instances")
        cols = ("X", "K", "Vb", "V_full", "V_baselr", "Vb_cos", "V_cos", "K_cos")
        print(f"  {'pair a->b':16s}" + "".join(f"{k:>10s}" for k in cols))
        for a, b in PAIRS:
            m = d["mean"][f"{a}->{b}"]
            print(f"  {a + '->' + b:16s}" + "".join(f"{m[k]:10.3f}" for k in cols))
        mean_pairs = {k: float(np.mean([d["mean"][f"{a}->{b}"][k] for a, b in PAIRS])) for k in cols}
        d["mean_over_pairs"] = mean_pairs
        print(f"  {'mean of pairs':16s}" + "".join(f"{mean_pairs[k]:10.3f}" for k in cols))
        print(f"  {'paper (Llama)':16s}" + " " * 50 + f"{0.9726:10.4f}{0.9576:10.4f}{0.9922:10.4f}")
        print(f"  {'paper (Ministral)':16s}" + " " * 50 + f"{0.9530:10.4f}{0.9200:10.4f}{0.9840:10.4f}")
        print(f"  {'adapter':16s}{'X_base':>10s}{'dV':>10s}")
        for r in ("plan", "action", "reflect"):
            m = d["mean"][r]
            print(f"  {r:16s}{m['X_base']:10.3f}{m['dV']:10.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
