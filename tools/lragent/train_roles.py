#!/usr/bin/env python3
"""Trains the LRAgent role adapters (plan, action, reflect) for the default
model on the two-hop task of task.py, with JAX on the CPU.

Why JAX: it is a CPU wheel of ~100 MB from PyPI; torch's default PyPI wheels
pull several GB of CUDA libraries, and nothing here needs a GPU (135M
parameters, a few hundred short sequences).

The Llama forward is written here in jax.numpy over the GGUF weights,
dequantized to f32 by the `gguf` package (tools/reference/llama_ref.Model).
Those weights keep llama.cpp's layout: the converter permuted the rows of
q_proj/k_proj so that adjacent-pair ("normal") RoPE equals HF's rotate_half;
so the forward uses adjacent-pair RoPE, and q_proj's lora_B is trained in
that permuted row order and un-permuted to HF order when saved (our PEFT
loader permutes it back, src/adapter/peft_loader.cpp). v_proj is not
permuted.

Setting (LRAgent §4 / App. C): LoRA on q_proj and v_proj, r = 8,
lora_alpha = 16 (scale 2), no dropout by default (ours: the data are clean
and few). `--dropout P` drops the LoRA input as PEFT's lora_dropout does (q
and v, independent masks); `--accum K` sums K batches of `--batch` into one
optimizer step (the paper's batch 32 is `--batch 4 --accum 8`).
Shared A: plan trains first (q A/B, v A/B); action and reflect then start
from plan's v_proj lora_A and keep it frozen (their q A/B and v B train), so
all three save a bit-identical v_proj lora_A. Each role's loss is only on its
own lines (tokens + the newline that ends each line) of the gold trajectory,
given everything before them, with the role's adapter on every token (the
`none` scheme: each agent computes the whole trajectory with its weights).

--icarus also trains `icarus_reflect`: the ICaRus way (paper 001 §3.2), the
logical encoder is the frozen base model, so K/V of every position are the
base model's; the adapter's decoder rows (one per predicted token) run with
LoRA and attend over the base K/V of positions 0..p, their own included.

Run (after AGENTKV_TRAIN=1 scripts/setup.sh):
  nice -n 10 .venv-train/bin/python tools/lragent/train_roles.py --out tools/lragent/adapters
"""
import argparse
import json
import math
import struct
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tools" / "reference"))

import task  # noqa: E402

R = 8
ALPHA = 16
SCALE = ALPHA / R
NEWLINE = "\n"


# ---------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------

def load_base(path):
    import llama_ref
    m = llama_ref.Model(path, dtype=np.float32)
    hp = m.hp
    assert not hp.neox, "the forward below is written for adjacent-pair RoPE (llama)"

    def stack(key, transpose=True):
        ws = [L[key] for L in m.layers]
        return np.stack([w.T if transpose else w for w in ws]).astype(np.float32)

    w = {
        "embd": m.tok_embd.astype(np.float32),
        "out": m.output.astype(np.float32),
        "out_norm": m.output_norm.astype(np.float32),
        "attn_norm": stack("attn_norm", False),
        "ffn_norm": stack("ffn_norm", False),
        "wq": stack("wq"), "wk": stack("wk"), "wv": stack("wv"), "wo": stack("wo"),
        "wg": stack("w_gate"), "wu": stack("w_up"), "wd": stack("w_down"),
    }
    tok = llama_ref.make_tokenizer(m.reader)
    return hp, w, tok


# ---------------------------------------------------------------------------
# JAX model
# ---------------------------------------------------------------------------

def make_fns(hp, expose=False, dropout=0.0):
    import jax
    import jax.numpy as jnp

    H, Hkv, hd = hp.n_head, hp.n_head_kv, hp.head_dim
    group = H // Hkv
    eps = hp.eps
    half = hp.n_rot // 2
    inv_freq = (hp.rope_base ** (-np.arange(half, dtype=np.float64) * 2.0 / hp.n_rot)).astype(np.float32)

    def rms(x, g):
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * g

    def rope(x, pos):
        # x [..., T, n, hd] with pos [..., T]: adjacent pairs (x[2i], x[2i+1]).
        th = pos[..., None].astype(jnp.float32) * inv_freq  # [..., T, half]
        c, s = jnp.cos(th)[..., None, :], jnp.sin(th)[..., None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        y0, y1 = x0 * c - x1 * s, x0 * s + x1 * c
        return jnp.stack([y0, y1], axis=-1).reshape(x.shape)

    def lora(h, a, b, key=None):
        # a [r, d_in], b [d_out, r] (PEFT shapes); scale alpha / r. With a
        # key, PEFT's lora_dropout on the input (inverted: kept / (1 - p)).
        if key is not None and dropout > 0:
            keep = jax.random.bernoulli(key, 1.0 - dropout, h.shape)
            h = jnp.where(keep, h / (1.0 - dropout), 0.0)
        return SCALE * ((h @ a.T) @ b.T)

    def ffn(x, lw, L, h_lora):
        h = rms(x, lw["ffn_norm"])
        g = h @ lw["wg"]
        u = h @ lw["wu"]
        if h_lora:
            g = g + lora(h, L["ag"], L["bg"])
            u = u + lora(h, L["au"], L["bu"])
        f = jax.nn.silu(g) * u
        d = f @ lw["wd"]
        if h_lora:
            d = d + lora(f, L["ad"], L["bd"])
        return x + d

    def attend(q, k, v, mask):
        # q [B, Tq, H, hd], k/v [B, Tk, Hkv, hd], mask [B or 1, Tq, Tk] bool
        B, Tq = q.shape[0], q.shape[1]
        qg = q.reshape(B, Tq, Hkv, group, hd)
        s = jnp.einsum("bqkgd,bskd->bkgqs", qg, k) / math.sqrt(hd)
        s = jnp.where(mask[:, None, None], s, -1e30)
        p = jax.nn.softmax(s, axis=-1)
        o = jnp.einsum("bkgqs,bskd->bqkgd", p, v)
        return o.reshape(B, Tq, H * hd)

    def body(w, lora_p, tokens, collect_kv=False, key=None):
        """Full causal forward with LoRA (q,v) on every position. Returns the
        final hidden states [B, T, d] (and base-or-adapted K/V per layer).
        A key turns on the LoRA dropout (training only)."""
        B, T = tokens.shape
        pos = jnp.broadcast_to(jnp.arange(T), (B, T))
        mask = jnp.tril(jnp.ones((T, T), bool))[None]
        x = w["embd"][tokens]

        def layer(x, xs):
            lw, L, ks = xs
            h = rms(x, lw["attn_norm"])
            q = h @ lw["wq"]
            k = h @ lw["wk"]
            v = h @ lw["wv"]
            if L is not None:
                q = q + lora(h, L["aq"], L["bq"], None if ks is None else ks[0])
                v = v + lora(h, L["av"], L["bv"], None if ks is None else ks[1])
            q = rope(q.reshape(B, T, H, hd), pos)
            k = rope(k.reshape(B, T, Hkv, hd), pos)
            v = v.reshape(B, T, Hkv, hd)
            o = attend(q, k, v, mask)
            x = x + o @ lw["wo"]
            x = ffn(x, lw, None, False)
            return x, ((k, v) if collect_kv else None)

        lw_all = {k: w[k] for k in ("attn_norm", "ffn_norm", "wq", "wk", "wv", "wo", "wg", "wu", "wd")}
        keys = None if key is None else jax.random.split(key, 2 * hp.n_layer).reshape(hp.n_layer, 2, -1)
        x, kv = jax.lax.scan(layer, x, (lw_all, lora_p, keys))
        return x, kv

    def logits_at(w, x, idx):
        # x [B, T, d], idx [B, M] -> [B, M, vocab]
        xs = jnp.take_along_axis(x, idx[..., None], axis=1)
        return rms(xs, w["out_norm"]) @ w["out"].T

    def ce(logits, tgt, m):
        lp = jax.nn.log_softmax(logits, axis=-1)
        nll = -jnp.take_along_axis(lp, tgt[..., None], axis=-1)[..., 0]
        return jnp.sum(nll * m) / jnp.maximum(jnp.sum(m), 1.0)

    def loss_lora(train_p, frozen_p, w, tokens, idx, tgt, m, key=None):
        lp = {**frozen_p, **train_p}
        x, _ = body(w, lp, tokens, key=key if dropout > 0 else None)
        return ce(logits_at(w, x, idx), tgt, m)

    def icarus_logits(w, lp, tokens, idx):
        """Encoder: the base model over all tokens (frozen, no LoRA). Decoder:
        one row per predicting position p = idx, LoRA on q/o/gate/up/down,
        attending over the encoder's K/V of 0..p (its own position's base K/V
        included). Decoder rows write no K/V, so they are independent."""
        B, T = tokens.shape
        M = idx.shape[1]
        _, kv = body(w, None, tokens, collect_kv=True)
        kv = jax.lax.stop_gradient(kv)
        x = w["embd"][jnp.take_along_axis(tokens, idx, axis=1)]  # [B, M, d]
        mask = jnp.arange(T)[None, None, :] <= idx[:, :, None]     # [B, M, T]

        def layer(x, xs):
            lw, L, (kb, vb) = xs
            h = rms(x, lw["attn_norm"])
            q = h @ lw["wq"] + lora(h, L["aq"], L["bq"])
            q = rope(q.reshape(B, M, H, hd), idx)
            o = attend(q, kb, vb, mask)
            x = x + o @ lw["wo"] + lora(o, L["ao"], L["bo"])
            x = ffn(x, lw, L, True)
            return x, None

        lw_all = {k: w[k] for k in ("attn_norm", "ffn_norm", "wq", "wk", "wv", "wo", "wg", "wu", "wd")}
        x, _ = jax.lax.scan(layer, x, (lw_all, lp, kv))
        return rms(x, w["out_norm"]) @ w["out"].T

    def loss_icarus(train_p, frozen_p, w, tokens, idx, tgt, m, key=None):  # no dropout (main refuses it)
        return ce(icarus_logits(w, {**frozen_p, **train_p}, tokens, idx), tgt, m)

    if expose:
        return {"body": body, "logits_at": logits_at, "icarus": icarus_logits}
    return loss_lora, loss_icarus


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------

def build_examples(tok, role, seed, n, newline_id):
    """Sequences cut after the role's last line; targets = the role's lines."""
    import llama_ref
    enc = lambda s: llama_ref.encode(tok, s)  # noqa: E731
    out = []
    for i in range(n):
        inst = task.make_instance(seed, i)
        ids, spans = task.trajectory_ids(enc, inst, newline_id)
        mine = [(s, e) for r, s, e in spans if r == role]
        end = mine[-1][1]
        tg = [t for s, e in mine for t in range(s, e)]
        out.append((ids[:end], tg))
    return out


def batches(examples, batch, T, M, rng):
    order = rng.permutation(len(examples))
    for b in range(0, len(order) - batch + 1, batch):
        toks = np.zeros((batch, T), np.int32)
        idx = np.zeros((batch, M), np.int32)
        tgt = np.zeros((batch, M), np.int32)
        msk = np.zeros((batch, M), np.float32)
        for j, e in enumerate(order[b:b + batch]):
            ids, tg = examples[e]
            toks[j, :len(ids)] = ids
            idx[j, :len(tg)] = [t - 1 for t in tg]   # the position predicting token t
            tgt[j, :len(tg)] = [ids[t] for t in tg]
            msk[j, :len(tg)] = 1.0
        yield toks, idx, tgt, msk


# ---------------------------------------------------------------------------
# LoRA parameters, optimizer
# ---------------------------------------------------------------------------

def init_lora(rng, hp, modules):
    """PEFT's init: A ~ kaiming-uniform (bound 1/sqrt(d_in)), B = 0.
    Returned stacked over layers: a [L, r, d_in], b [L, d_out, r]."""
    d, kv, f = hp.d_model, hp.n_head_kv * hp.head_dim, hp.d_ffn
    shapes = {"q": (d, hp.n_head * hp.head_dim), "v": (d, kv), "o": (hp.n_head * hp.head_dim, d),
              "g": (d, f), "u": (d, f), "d": (f, d)}
    p = {}
    for mname in modules:
        din, dout = shapes[mname]
        bound = 1.0 / math.sqrt(din)
        p["a" + mname] = rng.uniform(-bound, bound, (hp.n_layer, R, din)).astype(np.float32)
        p["b" + mname] = np.zeros((hp.n_layer, dout, R), np.float32)
    return p


def train(hp, w_j, loss_fn, train_p, frozen_p, examples, args, label, seed):
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    T = max(len(e[0]) for e in examples)
    T = (T + 15) // 16 * 16
    M = max(len(e[1]) for e in examples)
    steps_per_epoch = len(examples) // (args.batch * args.accum)
    if steps_per_epoch == 0:
        raise SystemExit(f"[{label}] {len(examples)} examples make no step of --batch {args.batch} x --accum {args.accum}")
    total = steps_per_epoch * args.epochs
    warm = max(1, int(0.05 * total))

    grad_fn = jax.jit(jax.value_and_grad(loss_fn))
    key = jax.random.PRNGKey(seed)

    @jax.jit
    def adam(p, g, m, v, step, lr):
        # AdamW without weight decay (the paper's Table 8: 0), global-norm clip 1.
        gn = jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree_util.tree_leaves(g)))
        c = jnp.minimum(1.0, 1.0 / (gn + 1e-6))
        g = jax.tree_util.tree_map(lambda x: x * c, g)
        m = jax.tree_util.tree_map(lambda m_, g_: 0.9 * m_ + 0.1 * g_, m, g)
        v = jax.tree_util.tree_map(lambda v_, g_: 0.999 * v_ + 0.001 * g_ * g_, v, g)
        bc1, bc2 = 1 - 0.9 ** step, 1 - 0.999 ** step
        p = jax.tree_util.tree_map(lambda p_, m_, v_: p_ - lr * (m_ / bc1) / (jnp.sqrt(v_ / bc2) + 1e-8), p, m, v)
        return p, m, v, gn

    p = jax.tree_util.tree_map(jnp.asarray, train_p)
    fz = jax.tree_util.tree_map(jnp.asarray, frozen_p)
    m = jax.tree_util.tree_map(jnp.zeros_like, p)
    v = jax.tree_util.tree_map(jnp.zeros_like, p)
    t0 = time.time()
    step = 0
    log = []
    for ep in range(args.epochs):
        micro = list(batches(examples, args.batch, T, M, rng))
        for s0 in range(0, steps_per_epoch * args.accum, args.accum):
            step += 1
            if step <= warm:
                lr = args.lr * step / warm
            else:
                lr = args.lr * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))
            # One optimizer step = the mean of --accum batches' gradients (each
            # batch's loss is its own token mean, as HF's accumulation does).
            loss, g = 0.0, None
            for toks, idx, tgt, msk in micro[s0:s0 + args.accum]:
                key, sub = jax.random.split(key)
                li, gi = grad_fn(p, fz, w_j, toks, idx, tgt, msk, sub)
                loss += float(li) / args.accum
                g = gi if g is None else jax.tree_util.tree_map(jnp.add, g, gi)
            if args.accum > 1:
                g = jax.tree_util.tree_map(lambda x: x / args.accum, g)
            p, m, v, gn = adam(p, g, m, v, step, lr)
            log.append(loss)
            if step == 1 or step % args.log_every == 0 or step == total:
                print(f"[{label}] step {step}/{total} epoch {ep} loss {loss:.4f} "
                      f"|g| {float(gn):.3f} lr {lr:.2e} {time.time() - t0:.0f}s", flush=True)
    return {k: np.asarray(x) for k, x in p.items()}, {"seconds": time.time() - t0, "steps": total,
                                                      "seq_len": T, "final_loss": float(np.mean(log[-5:])),
                                                      "first_loss": log[0]}


# ---------------------------------------------------------------------------
# PEFT output
# ---------------------------------------------------------------------------

PEFT_NAMES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
              "o": "self_attn.o_proj", "g": "mlp.gate_proj", "u": "mlp.up_proj", "d": "mlp.down_proj"}


def unpermute_rows(b, n_head):
    """GGUF row order (per head: interleaved pairs) -> HF order (per head: the
    first halves, then the second halves). Inverse of peft_loader's
    permute_rows_for_rope: GGUF row h*hd + 2i + j is HF row h*hd + j*hd/2 + i."""
    rows, r = b.shape
    hd = rows // n_head
    return b.reshape(n_head, hd // 2, 2, r).transpose(0, 2, 1, 3).reshape(rows, r)


def write_safetensors(path, tensors, metadata=None):
    """safetensors by hand: 8-byte LE header length, JSON header, raw data."""
    header = {}
    off = 0
    blobs = []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for blob in blobs:
            f.write(blob)


def save_adapter(out_dir, params, hp, modules, extra_cfg):
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for layer in range(hp.n_layer):
        for mname in modules:
            a = params["a" + mname][layer]
            b = params["b" + mname][layer]
            if mname == "q":
                b = unpermute_rows(b, hp.n_head)
            pre = f"base_model.model.model.layers.{layer}.{PEFT_NAMES[mname]}"
            tensors[pre + ".lora_A.weight"] = a
            tensors[pre + ".lora_B.weight"] = b
    write_safetensors(out_dir / "adapter_model.safetensors", tensors, {"format": "pt"})
    cfg = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "r": R,
        "lora_alpha": ALPHA,
        "lora_dropout": 0.0,
        "target_modules": [PEFT_NAMES[m].split(".")[1] for m in modules],
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "inference_mode": True,
    }
    cfg.update(extra_cfg)
    (out_dir / "adapter_config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=str(HERE / "adapters"))
    ap.add_argument("--train-seed", type=int, default=1, help="task seed of the training instances (eval uses 0)")
    ap.add_argument("--n-train", default="plan=48,action=176,reflect=32,icarus_reflect=64",
                    help="training instances per role (one epoch each)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=4, help="examples per forward (per accumulated batch)")
    ap.add_argument("--accum", type=int, default=1, help="batches summed into one optimizer step")
    ap.add_argument("--dropout", type=float, default=0.0, help="PEFT lora_dropout on the adapters' input")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0, help="init / shuffling seed")
    ap.add_argument("--roles", default="plan,action,reflect")
    ap.add_argument("--icarus", action="store_true", help="also train icarus_reflect")
    ap.add_argument("--log-every", type=int, default=8)
    args = ap.parse_args(argv)
    if args.accum < 1 or not 0.0 <= args.dropout < 1.0:
        ap.error("--accum must be >= 1 and --dropout in [0, 1)")
    if args.icarus and args.dropout > 0:
        ap.error("--dropout applies to the role adapters; the icarus decoder is trained without it")

    t_all = time.time()
    import jax
    jax.config.update("jax_default_matmul_precision", "highest")
    hp, w, tok = load_base(args.model)
    newline_id = tok.encode(NEWLINE, add_special_tokens=False).ids
    assert len(newline_id) == 1
    newline_id = newline_id[0]
    w_j = {k: jax.numpy.asarray(x) for k, x in w.items()}
    print(f"[train] loaded {args.model} in {time.time() - t_all:.0f}s; newline id {newline_id}", flush=True)
    loss_lora, loss_icarus = make_fns(hp, dropout=args.dropout)
    out = Path(args.out)
    report = {"args": vars(args), "jax": jax.__version__, "roles": {}}
    rng = np.random.default_rng(args.seed)
    shared_av = None
    roles = [r for r in args.roles.split(",") if r]
    n_train = dict((kv.split("=")[0], int(kv.split("=")[1])) for kv in args.n_train.split(","))
    for role in roles:
        ex = build_examples(tok, role, args.train_seed + ROLES_SEED_OFFSET[role], n_train[role], newline_id)
        p = init_lora(rng, hp, "qv")
        if role == "plan":
            train_p, frozen_p = p, {}
        else:
            if shared_av is None:
                shared_av = load_plan_av(out / "plan", hp)
            frozen_p = {"av": shared_av}
            train_p = {k: v for k, v in p.items() if k != "av"}
        params, info = train(hp, w_j, loss_lora, train_p, frozen_p, ex, args, role, args.seed + 1)
        params.update(frozen_p)
        if role == "plan":
            shared_av = params["av"]
        save_adapter(out / role, params, hp, "qv", {"lora_dropout": args.dropout})
        info["examples"] = len(ex)
        report["roles"][role] = info
        print(f"[train] {role}: {info}", flush=True)
    if args.icarus:
        ex = build_examples(tok, "reflect", args.train_seed + ROLES_SEED_OFFSET["reflect"], n_train["icarus_reflect"],
                            newline_id)
        p = init_lora(rng, hp, "qogud")
        params, info = train(hp, w_j, loss_icarus, p, {}, ex, args, "icarus_reflect", args.seed + 2)
        save_adapter(out / "icarus_reflect", params, hp, "qogud", {})
        info["examples"] = len(ex)
        report["roles"]["icarus_reflect"] = info
        print(f"[train] icarus_reflect: {info}", flush=True)
    report["total_seconds"] = time.time() - t_all
    print(f"[train] total {report['total_seconds']:.0f}s", flush=True)
    name = "train_report.json" if roles else "train_report_icarus.json"
    (out / name).write_text(json.dumps(report, indent=2) + "\n")
    return 0


# Each role trains on its own instances (disjoint task indices would need a
# bigger range; distinct seeds are simpler). Eval uses seed 0.
ROLES_SEED_OFFSET = {"plan": 0, "action": 100, "reflect": 200}


def load_plan_av(plan_dir, hp):
    """v_proj lora_A of a saved plan adapter, stacked [L, r, d]."""
    path = plan_dir / "adapter_model.safetensors"
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = []
    for layer in range(hp.n_layer):
        e = header[f"base_model.model.model.layers.{layer}.self_attn.v_proj.lora_A.weight"]
        assert e["dtype"] == "F32"
        s, t = e["data_offsets"]
        out.append(np.frombuffer(raw[8 + n + s:8 + n + t], "<f4").reshape(e["shape"]))
    return np.stack(out)


if __name__ == "__main__":
    sys.exit(main())
