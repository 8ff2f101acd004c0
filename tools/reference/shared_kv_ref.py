#!/usr/bin/env python3
"""Independent numpy reference of the shared-K/V schemes of LRAgent (docs/scheme_algorithms.md
§1.2-1.3; docs/usage.md "Shared-K/V schemes (LRAgent)") for two LoRA agents
on one Llama base.

Shares no code with the engine. The base model is tools/reference/llama_ref.py
(gguf-py dequantization, float64 by default); PEFT adapters are read from
adapter_config.json + adapter_model.safetensors by a small safetensors reader
below (numpy only: the CI environment has numpy, gguf and tokenizers).

The scenario
------------
Agent A (the producer, adapter a) runs a prompt P; its K/V of P's positions
are what the shared cache holds. Agent B (the consumer, adapter b) then runs
P + S (S a short suffix). `consumer_logits` returns B's logits for the next
token after P + S under one scheme. Positions are 0..N-1, N = |P| + |S|; B's
query at position p attends to keys 0..p (causal) in every layer.

Notation, per layer l and position p:
  x_p       the residual stream entering layer l (an agent's own);
  X_p       = RMSNorm(x_p) * attn_norm: the normed hidden state that every
            attention projection of layer l reads (q, k, v and their LoRA);
  K_p       = RoPE(X_p · W_k^T): keys are stored after RoPE (adjacent-pair
            rotation for the llama GGUF, whose converter permuted HF's q/k rows;
            see llama_ref.py). No adapter here has a k_proj LoRA; one that had
            would add it before RoPE (refused by the lragent schemes);
  Vb_p      = X_p · W_v^T: the base V, no LoRA;
  LR_p      = X_p · A_v^T: the v_proj LoRA's low-rank row (r values, before
            scaling, shared by every KV head);
  V_p(j)    = Vb_p + s_j · LR_p · B_{v,j}^T with agent j's B (s_j = alpha/r, or
            alpha/sqrt(r) under rsLoRA): the LoRA V of PEFT, merged or not;
  Q_p       = RoPE(X_p · W_q^T + s · (X_p · A_q^T) · B_q^T) with the querying
            agent's q LoRA (always live, never cached). q_proj's B is stored in
            HF's row order by PEFT; its rows are permuted to the GGUF order
            (HF row h*hd + j*hd/2 + i -> GGUF row h*hd + 2i + j) so that the
            LoRA delta lands on the same rows as the converted W_q.
  GQA: query head h reads KV head h // (n_head / n_head_kv); attention is
  softmax(Q K^T / sqrt(head_dim)) V per head, then W_o, residual, FFN.
Subscripts A / B say whose forward (whose residual stream) computed X.

The schemes: what B's attention reads for P's positions (S's positions are
always B's own: K = K_B, V = V_B(b), computed by B's forward):
  none            B computes all of P + S itself: plain LoRA (Non-Shared).
  full            (FullShared) K_A and V_A(a) of P from A's forward, V with A's
                  own LoRA term. B runs only S's positions.
  lragent-base    (BaseShared) K_A and Vb_A of P from A's forward; B runs its
                  own forward over ALL of P + S (the "LR prefill": B's hidden
                  states at every position, attending as below), keeps A's base
                  rows for P and adds its own LR rows LR_B for every position.
                  Attention everywhere reads K = K_A (P) / K_B (S) and
                  V = Vb + s_b · LR_B · B_{v,b}^T (Vb = Vb_A on P, Vb_B on S).
  lragent-baselr  (BaseLRShared, shared A_v) K_A, Vb_A and LR_A of P, all from
                  A's forward (LR_A = X_A · A_v^T with the SAME A_v, which the
                  two adapters share); B runs only S's positions with its own q
                  LoRA, and attention reads V = Vb_A + s_b · LR_A · B_{v,b}^T on
                  P (B's own B over A's LR rows).
  droidspeak      (DroidSpeak with critical layers C) as `full`, except that in
                  the layers of C the K/V of P's positions are B's own (K_B,
                  V_B(b)), which replace A's. B's rows for P start at layer 0
                  and run through layer max(C) (no hidden-state snapshot),
                  computing K/V only where they are written (C) and attending
                  over A's K/V of P in the other layers and over B's own in the
                  layers of C; S then runs through all layers as usual. With
                  C = every layer this is `none`.

With one agent (a == b) all five give `none`'s logits; docs/scheme_algorithms.md §1.4.

CLI:
  python3 tools/reference/shared_kv_ref.py --model M --producer DIR --consumer DIR \\
      --prompt-tokens 1,2,... --suffix-tokens 3,4 [--critical-layers 0,5,9 ...] \\
      [--dtype float32] [--out FILE.npz]
prints the top-5 next-token log-probabilities of B under every scheme (and
writes every case's log-softmax with --out), or
  python3 tools/reference/shared_kv_ref.py --model M --jobs JOBS.json --out OUT.npz
runs a list of producers and consumers (see run_jobs). numpy's OpenBLAS is
much faster single-threaded on a busy machine: OPENBLAS_NUM_THREADS=1 (a
285-token forward takes ~2 s in float64 on one core, the model load ~5 s).
"""
import argparse
import json
import struct
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_ref  # noqa: E402

SCHEMES = ("none", "full", "lragent-base", "lragent-baselr", "droidspeak")

# PEFT module names -> the reference's short names.
_TARGETS = {"q_proj": "q", "k_proj": "k", "v_proj": "v"}

_ST_DTYPES = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2")}


# ---- PEFT adapters -------------------------------------------------------------

def read_safetensors(path):
    """{name: numpy array} of a .safetensors file: an 8-byte little-endian
    header length, a JSON header {name: {dtype, shape, data_offsets}}, then the
    raw tensor bytes (offsets relative to the end of the header)."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        buf = raw[base + begin:base + end]
        if e["dtype"] == "BF16":
            u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        elif e["dtype"] in _ST_DTYPES:
            arr = np.frombuffer(buf, dtype=_ST_DTYPES[e["dtype"]])
        else:
            raise ValueError(f"{path}: tensor {name} has dtype {e['dtype']}, not supported")
        out[name] = arr.reshape(e["shape"])
    return out


def hf_to_gguf_rows(b, n_heads):
    """Rows of a q_proj/k_proj output (HF order: per head, the first halves of
    the rotary pairs, then the second halves) in the order of llama.cpp's
    converted weights (per head, pairs adjacent): GGUF row h*hd + 2i + j is HF
    row h*hd + j*hd/2 + i. b: [n_heads*hd, ...]."""
    hd = b.shape[0] // n_heads
    return b.reshape(n_heads, 2, hd // 2, *b.shape[1:]).swapaxes(1, 2).reshape(b.shape)


class Adapter:
    """A PEFT LoRA adapter: per layer {target: (A [r, d_in], B [d_out, r])}
    for q/k/v_proj, and its scale s (alpha/r, alpha/sqrt(r) with rsLoRA).
    B of q_proj/k_proj is permuted to the GGUF row order of a llama model."""

    def __init__(self, path, hp, dtype=np.float64):
        path = Path(path)
        self.name = path.name
        cfg = json.loads((path / "adapter_config.json").read_text())
        if cfg.get("peft_type", "LORA") != "LORA":
            raise ValueError(f"{path}: peft_type {cfg.get('peft_type')} is not LORA")
        if cfg.get("rank_pattern") or cfg.get("alpha_pattern") or cfg.get("use_dora"):
            raise ValueError(f"{path}: rank/alpha patterns and DoRA are not supported by the reference")
        r, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
        self.rank = r
        self.scale = alpha / np.sqrt(r) if cfg.get("use_rslora") else alpha / r
        tensors = read_safetensors(path / "adapter_model.safetensors")
        self.layers = [dict() for _ in range(hp.n_layer)]
        seen = 0
        for name, arr in tensors.items():
            # base_model.model.model.layers.{i}.self_attn.{q,k,v}_proj.lora_{A,B}.weight
            parts = name.split(".")
            try:
                i = int(parts[parts.index("layers") + 1])
            except (ValueError, IndexError):
                raise ValueError(f"{path}: unexpected tensor name {name}")
            module = parts[-3]
            if module not in _TARGETS:
                raise ValueError(f"{path}: LoRA on {module}: the reference handles q/k/v_proj only")
            if parts[-2] not in ("lora_A", "lora_B"):
                raise ValueError(f"{path}: unexpected tensor name {name}")
            t = _TARGETS[module]
            a_b = self.layers[i].setdefault(t, [None, None])
            a_b[0 if parts[-2] == "lora_A" else 1] = np.asarray(arr, dtype=dtype)
            seen += 1
        for i, layer in enumerate(self.layers):
            for t, (a, b) in list(layer.items()):
                if a is None or b is None or a.shape[0] != r or b.shape[1] != r:
                    raise ValueError(f"{path}: layer {i} {t}_proj: incomplete or not rank {r}")
                if t in "qk" and not hp.neox:
                    b = hf_to_gguf_rows(b, hp.n_head if t == "q" else hp.n_head_kv)
                layer[t] = (np.ascontiguousarray(a), np.ascontiguousarray(b))
        if seen == 0:
            raise ValueError(f"{path}: no LoRA tensors")

    def delta(self, il, t, X):
        """s · (X · A^T) · B^T for target t at layer il, or None."""
        ab = self.layers[il].get(t)
        if ab is None:
            return None
        a, b = ab
        return self.scale * ((X @ a.T) @ b.T)

    def lr(self, il, X):
        """LR rows X · A_v^T [T, r] (unscaled), or None without a v_proj LoRA."""
        ab = self.layers[il].get("v")
        return None if ab is None else X @ ab[0].T

    def v_up(self, il, lr):
        """s · LR · B_v^T [T, kv_dim] (zeros when there is no v_proj LoRA)."""
        ab = self.layers[il].get("v")
        return self.scale * (lr @ ab[1].T)


# ---- the forward -------------------------------------------------------------------

class Own:
    """What an agent's forward computed at one layer for its active rows
    (positions `pos`): K (post-RoPE) [Hkv, n, hd], Vb and V (with the agent's
    LoRA) [Hkv, n, hd], LR [n, r] (None without a v_proj LoRA)."""

    def __init__(self, pos, k, vb, v, lr):
        self.pos, self.k, self.vb, self.v, self.lr = pos, k, vb, v, lr


class AgentCache:
    """A producer's per-layer K, Vb, V and LR of its prompt positions 0..n-1."""

    def __init__(self, n_layer):
        self.k, self.vb, self.v, self.lr = ([None] * n_layer for _ in range(4))


def _heads(y, n, hd):
    return y.reshape(len(y), n, hd).transpose(1, 0, 2)  # [T, n*hd] -> [n, T, hd]


def forward_rows(model, adapter, tokens, rows, attend, layer_end=None, keep=None, n_logits=1):
    """An agent's forward over `rows` (ascending positions into `tokens`; the
    last one must be len(tokens) - 1).

    attend(il, own) -> (K, V), each [Hkv, N, hd] for positions 0..N-1 (only
    positions <= a query's are read): what the rows attend over at layer il,
    given `own`, this agent's projections of the rows active at il.
    layer_end(pos) -> the layer after which the row at pos stops (default: the
    last layer; a stopped row no longer computes anything).
    keep: an AgentCache to record `own` of every layer (a producer's cache).
    Returns the logits [n_logits, n_vocab] of the last n_logits rows (which
    must run through every layer)."""
    hp = model.hp
    tokens = np.asarray(tokens, dtype=np.int64)
    rows = np.asarray(rows, dtype=np.int64)
    N = len(tokens)
    if rows[-1] != N - 1:
        raise ValueError("the last row must be the last token")
    H, Hkv, hd = hp.n_head, hp.n_head_kv, hp.head_dim
    group = H // Hkv
    scale = 1.0 / np.sqrt(hd)
    ends = np.array([hp.n_layer if layer_end is None else layer_end(int(p)) for p in rows])
    x = model.tok_embd[tokens[rows]]  # [n_rows, d]
    pos = rows
    for il, L in enumerate(model.layers):
        act = ends > il
        if not act.all():
            x, pos, ends = x[act], pos[act], ends[act]
        T = len(pos)
        X = llama_ref.rms_norm(x, L["attn_norm"], hp.eps)
        q = X @ L["wq"].T
        k = X @ L["wk"].T
        vb = X @ L["wv"].T
        for t, y in (("q", q), ("k", k)):
            d = adapter.delta(il, t, X) if adapter is not None else None
            if d is not None:
                y += d
        if "attn_q.bias" in L:
            q, k, vb = q + L["attn_q.bias"], k + L["attn_k.bias"], vb + L["attn_v.bias"]
        lr = adapter.lr(il, X) if adapter is not None else None
        v = vb if lr is None else vb + adapter.v_up(il, lr)
        q, k, vb, v = _heads(q, H, hd), _heads(k, Hkv, hd), _heads(vb, Hkv, hd), _heads(v, Hkv, hd)
        if "attn_q_norm.weight" in L:
            q = llama_ref.rms_norm(q, L["attn_q_norm.weight"], hp.eps)
            k = llama_ref.rms_norm(k, L["attn_k_norm.weight"], hp.eps)
        q = llama_ref.rope(q, pos, hp, model.rope_freqs)
        k = llama_ref.rope(k, pos, hp, model.rope_freqs)
        own = Own(pos, k, vb, v, lr)
        if keep is not None:
            keep.k[il], keep.vb[il], keep.v[il], keep.lr[il] = k, vb, v, lr
        K, V = attend(il, own)
        S = K.shape[1]
        mask = np.where(np.arange(S)[None, :] <= pos[:, None], 0.0, -np.inf)
        s = (q.reshape(Hkv, group * T, hd) @ K.transpose(0, 2, 1)).reshape(Hkv, group, T, S) * scale + mask
        s = s - s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=-1, keepdims=True)
        o = (p.reshape(Hkv, group * T, S) @ V).reshape(H, T, hd).transpose(1, 0, 2).reshape(T, H * hd)
        x = x + o @ L["wo"].T
        h = llama_ref.rms_norm(x, L["ffn_norm"], hp.eps)
        x = x + (llama_ref.silu(h @ L["w_gate"].T) * (h @ L["w_up"].T)) @ L["w_down"].T
    if len(pos) < n_logits or np.any(pos[-n_logits:] != rows[-n_logits:]):
        raise ValueError("a row with logits stopped before the last layer")
    xo = llama_ref.rms_norm(x[-n_logits:], model.output_norm, hp.eps)
    return xo @ model.output.T


def producer(model, adapter, prompt, n_logits=1):
    """Agent A's plain LoRA forward over `prompt` (positions 0..|P|-1): its
    per-layer K, Vb, V(a) and LR, and its logits at the last n_logits
    positions (.logits, [n_logits, n_vocab]). A's decode steps compute the
    same K/V as this prefill, so P may end with tokens A generated."""
    cache = AgentCache(model.hp.n_layer)
    n = len(prompt)

    def attend(il, own):
        return own.k, own.v

    logits = forward_rows(model, adapter, prompt, np.arange(n), attend, keep=cache, n_logits=n_logits)
    cache.n = n
    cache.logits = logits
    return cache


def _cat(a, b):
    return np.concatenate([a, b], axis=1)


def consumer_logits(model, scheme, adapter, prompt, suffix, cache, critical_layers=None, n_logits=1):
    """Agent B's (adapter `adapter`) next-token logits after prompt + suffix
    under `scheme`, where `cache` = producer(model, adapter_a, prompt) holds
    A's K/V of the prompt. See the module docstring for each scheme. Returns
    [n_vocab], or with n_logits > 1 the logits after each of the last n_logits
    positions [n_logits, n_vocab] (n_logits <= |S|: B's own tokens, e.g.
    tokens it generated, whose decode steps compute what this prefill does)."""
    out = _consumer(model, scheme, adapter, prompt, suffix, cache, critical_layers, n_logits)
    return out[0] if n_logits == 1 else out


def _consumer(model, scheme, adapter, prompt, suffix, cache, critical_layers, n_logits):
    P, N = len(prompt), len(prompt) + len(suffix)
    if not 1 <= n_logits <= len(suffix):
        raise ValueError("n_logits must be within the suffix")
    if cache.n != P:
        raise ValueError("the producer's cache does not cover the prompt")
    if len(suffix) == 0:
        raise ValueError("the suffix must not be empty")
    tokens = list(prompt) + list(suffix)
    all_rows, s_rows = np.arange(N), np.arange(P, N)

    def lr_v(il, vb, lr):
        return vb if lr is None else vb + _heads(adapter.v_up(il, lr), model.hp.n_head_kv, model.hp.head_dim)

    if scheme == "none":
        return forward_rows(model, adapter, tokens, all_rows, lambda il, own: (own.k, own.v), n_logits=n_logits)
    if scheme == "full":
        return forward_rows(model, adapter, tokens, s_rows,
                            lambda il, own: (_cat(cache.k[il], own.k), _cat(cache.v[il], own.v)),
                            n_logits=n_logits)
    if scheme == "lragent-base":
        def attend(il, own):
            # own covers all of P + S: A's base rows for P, B's own for S, and
            # B's own LR rows everywhere.
            K = _cat(cache.k[il], own.k[:, P:])
            Vb = _cat(cache.vb[il], own.vb[:, P:])
            return K, lr_v(il, Vb, own.lr)
        return forward_rows(model, adapter, tokens, all_rows, attend, n_logits=n_logits)
    if scheme == "lragent-baselr":
        def attend(il, own):
            K = _cat(cache.k[il], own.k)
            Vb = _cat(cache.vb[il], own.vb)
            lr = None if own.lr is None else np.concatenate([cache.lr[il], own.lr], axis=0)
            return K, lr_v(il, Vb, lr)
        return forward_rows(model, adapter, tokens, s_rows, attend, n_logits=n_logits)
    if scheme == "droidspeak":
        C = sorted(set(int(c) for c in (critical_layers or ())))
        if not C or C[0] < 0 or C[-1] >= model.hp.n_layer:
            raise ValueError("droidspeak needs critical layers within the model")
        last = C[-1] + 1
        crit = set(C)

        def attend(il, own):
            if il in crit:
                # B's own rows of P are active here (il <= max C): its K/V of P
                # replace A's.
                assert len(own.pos) == N
                return own.k, own.v
            n_own_p = int(np.sum(own.pos < P))
            return _cat(cache.k[il], own.k[:, n_own_p:]), _cat(cache.v[il], own.v[:, n_own_p:])
        return forward_rows(model, adapter, tokens, all_rows, attend,
                            layer_end=lambda p: last if p < P else model.hp.n_layer, n_logits=n_logits)
    raise ValueError(f"unknown scheme {scheme!r} (use {', '.join(SCHEMES)})")


def log_softmax(logits):
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max()
    return z - np.log(np.sum(np.exp(z)))


def _layers(spec, n_layer):
    if spec == "all":
        return list(range(n_layer))
    return [int(c) for c in spec.split(",") if c.strip()]


def run_jobs(model, jobs, dtype=np.float64, log=None):
    """Runs a job description (the --jobs file):
      {"producers": {NAME: {"adapter": DIR, "tokens": [ids], "n_logits": k}},
       "consumers": {NAME: {"producer": NAME, "adapter": DIR, "scheme": S,
                            "critical_layers": [l, ...] (droidspeak), "suffix": [ids],
                            "n_logits": k}}}
    and returns {"producer/NAME" or "consumer/NAME": log-softmax [k, n_vocab]}.
    A consumer's prompt is its producer's tokens. Producers with the same
    adapter and tokens are computed once."""
    adapters, forwards, out = {}, {}, {}

    def adapter(path):
        if path not in adapters:
            adapters[path] = Adapter(path, model.hp, dtype)
        return adapters[path]

    def lsm(logits):
        return np.stack([log_softmax(r) for r in np.atleast_2d(logits)])

    caches = {}
    for name, j in jobs.get("producers", {}).items():
        t0 = time.time()
        key = (j["adapter"], tuple(j["tokens"]))
        k = int(j.get("n_logits", 1))
        if key not in forwards or forwards[key].logits.shape[0] < k:
            forwards[key] = producer(model, adapter(j["adapter"]), j["tokens"], n_logits=k)
        caches[name] = forwards[key]
        out["producer/" + name] = lsm(forwards[key].logits[-k:])
        if log:
            log(f"producer {name}: {len(j['tokens'])} tokens {time.time() - t0:.1f}s")
    for name, j in jobs.get("consumers", {}).items():
        t0 = time.time()
        cache = caches[j["producer"]]
        prompt = list(jobs["producers"][j["producer"]]["tokens"])
        k = int(j.get("n_logits", 1))
        logits = consumer_logits(model, j["scheme"], adapter(j["adapter"]), prompt, j["suffix"], cache,
                                 j.get("critical_layers"), n_logits=k)
        out["consumer/" + name] = lsm(logits)
        if log:
            log(f"consumer {name}: {j['scheme']}, {len(j['suffix'])} suffix tokens {time.time() - t0:.1f}s")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", "-m", required=True)
    ap.add_argument("--jobs", help="a JSON job file (see run_jobs); needs --out, replaces the options below")
    ap.add_argument("--producer", help="agent A's PEFT adapter directory")
    ap.add_argument("--consumer", help="agent B's PEFT adapter directory")
    ap.add_argument("--prompt-tokens", help="P: comma-separated token ids")
    ap.add_argument("--suffix-tokens", help="S: comma-separated token ids")
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--critical-layers", action="append",
                    help="droidspeak's critical layers, comma-separated or 'all' (repeatable: one "
                         "droidspeak result per set; default 0,5,9)")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--out", help="write an .npz: the log-softmax of B's next-token logits per case "
                                  "('none', ..., 'droidspeak:0,5,9'), and A's ('producer') after P; "
                                  "with --jobs, what run_jobs returns")
    args = ap.parse_args(argv)
    dtype = np.float64 if args.dtype == "float64" else np.float32
    t0 = time.time()
    model = llama_ref.Model(args.model, dtype=dtype)
    print(f"[shared_kv_ref] model load {time.time() - t0:.1f}s", file=sys.stderr)
    if args.jobs:
        if not args.out:
            ap.error("--jobs needs --out")
        jobs = json.loads(Path(args.jobs).read_text())
        results = run_jobs(model, jobs, dtype, log=lambda m: print(f"[shared_kv_ref] {m}", file=sys.stderr))
        np.savez(args.out, **results)
        return 0
    for need in ("producer", "consumer", "prompt_tokens", "suffix_tokens"):
        if getattr(args, need) is None:
            ap.error(f"--{need.replace('_', '-')} is required without --jobs")
    a = Adapter(args.producer, model.hp, dtype)
    b = Adapter(args.consumer, model.hp, dtype)
    P = [int(t) for t in args.prompt_tokens.split(",") if t.strip()]
    S = [int(t) for t in args.suffix_tokens.split(",") if t.strip()]
    t0 = time.time()
    cache = producer(model, a, P)
    results = {"producer": log_softmax(cache.logits[0])}
    print(f"[shared_kv_ref] producer ({len(P)} tokens) {time.time() - t0:.1f}s", file=sys.stderr)
    for scheme in args.schemes.split(","):
        sets = [None]
        if scheme == "droidspeak":
            sets = [_layers(c, model.hp.n_layer) for c in (args.critical_layers or ["0,5,9"])]
        for crit in sets:
            t0 = time.time()
            key = scheme if crit is None else f"{scheme}:{','.join(map(str, crit))}"
            lp = log_softmax(consumer_logits(model, scheme, b, P, S, cache, crit))
            results[key] = lp
            top = np.argsort(-lp)[:5]
            print(f"{key:15s} " + " ".join(f"{int(t)}:{lp[t]:.4f}" for t in top) + f"  ({time.time() - t0:.1f}s)")
    if args.out:
        np.savez(args.out, **results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
