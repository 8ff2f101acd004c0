#!/usr/bin/env python3
"""Checks that the saved adapters mean in the engine what they meant in
training: for a few gold trajectories cut inside a role's line, the JAX
forward of train_roles.py (with the adapter read back from its PEFT files,
q_proj's lora_B permuted to GGUF row order the way src/adapter/peft_loader.cpp
does it) and `agentkv serve` (top-5 logprobs of the next token, greedy, one
token) must agree. A wrong row order of q_proj's B shows up as a large
difference here.

  .venv-train/bin/python tools/lragent/check_engine_logits.py            # starts a server
  .venv-train/bin/python tools/lragent/check_engine_logits.py --url http://127.0.0.1:8000
"""
import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import eval_pipeline as ev  # noqa: E402
import task  # noqa: E402
import train_roles as tr  # noqa: E402

SHORT = {"q_proj": "q", "v_proj": "v", "o_proj": "o", "gate_proj": "g", "up_proj": "u", "down_proj": "d"}


def load_peft(d, hp):
    """Stacked {a?, b?} in the engine's layout (q's B rows permuted as the loader does)."""
    cfg = json.loads((d / "adapter_config.json").read_text())
    raw = (d / "adapter_model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for mod in cfg["target_modules"]:
        s = SHORT[mod]
        parent = "mlp" if s in "gud" else "self_attn"
        for ab in ("A", "B"):
            mats = []
            for layer in range(hp.n_layer):
                e = header[f"base_model.model.model.layers.{layer}.{parent}.{mod}.lora_{ab}.weight"]
                o0, o1 = e["data_offsets"]
                m = np.frombuffer(raw[8 + n + o0:8 + n + o1], "<f4").reshape(e["shape"])
                if ab == "B" and s == "q":
                    # HF -> GGUF rows: GGUF row h*hd + 2i + j = HF row h*hd + j*hd/2 + i.
                    H = hp.n_head
                    hd = m.shape[0] // H
                    m = m.reshape(H, 2, hd // 2, -1).transpose(0, 2, 1, 3).reshape(m.shape)
                mats.append(m)
            out[ab.lower() + s] = np.stack(mats)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url")
    ap.add_argument("--adapters", default=str(HERE / "adapters"))
    ap.add_argument("--n", type=int, default=3, help="trajectories per adapter")
    ap.add_argument("--tol", type=float, default=0.05, help="max |logprob difference| on the top-5")
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp
    hp, w, tok = tr.load_base(str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    w_j = {k: jnp.asarray(x) for k, x in w.items()}

    proc = None
    url = args.url
    if not url:
        sargs = argparse.Namespace(engine=str(ROOT / "build" / "agentkv"), threads=2, adapters=args.adapters,
                                   serve_args="")
        proc, url = ev.start_server(sargs)
    worst = 0.0
    try:
        import llama_ref
        enc = lambda s: llama_ref.encode(tok, s)  # noqa: E731
        cases = [("plan", "plan", "none", False), ("action", "action", "none", False),
                 ("reflect", "reflect", "none", False)]
        if (Path(args.adapters) / "icarus_reflect").is_dir():
            cases.append(("icarus_reflect", "reflect", "icarus", True))
        for name, role, scheme, icarus in cases:
            lp = load_peft(Path(args.adapters) / name, hp)
            for i in range(args.n):
                inst = task.make_instance(0, i)
                ids, spans = task.trajectory_ids(enc, inst, 198)
                s, e = [(s, e) for r, s, e in spans if r == role][-1]
                cut = s + (e - s) // 2 if i % 2 == 0 else s   # inside the line / its first token
                prompt = ids[:cut]
                toks = np.array([prompt], np.int32)
                idx = np.array([[cut - 1]], np.int32)
                lp_j = {k: jnp.asarray(v) for k, v in lp.items()}
                if icarus:
                    logits = icarus_logits(hp, w_j, lp_j, toks, idx)
                else:
                    logits = lora_logits(hp, w_j, lp_j, toks, idx)
                ref = np.asarray(jax.nn.log_softmax(logits))[0, 0]
                r = ev.post(url, "/v1/completions", {"model": name, "prompt": prompt, "max_tokens": 1,
                                                     "temperature": 0, "logprobs": 5, "kv_sharing": scheme})
                top = r["choices"][0]["logprobs"]["top_logprobs"][0]
                ids_top = {int(t) if t.lstrip("-").isdigit() else None: v for t, v in top.items()}
                if None in ids_top:  # keys are token texts: map through the tokenizer
                    ids_top = {}
                    for t, v in top.items():
                        tid = tok.token_to_id(t) if tok.token_to_id(t) is not None else enc(t)[0]
                        ids_top[tid] = v
                diff = max(abs(ref[t] - v) for t, v in ids_top.items())
                same = int(np.argmax(ref)) == max(ids_top, key=ids_top.get)
                worst = max(worst, diff)
                eng = " ".join(f"{t}:{v:.3f}" for t, v in sorted(ids_top.items(), key=lambda kv: -kv[1])[:3])
                print(f"{name:15s} q{i} cut {cut}: top-1 same {same}, max |dlogprob| on engine top-5 {diff:.4f}"
                      f" (engine {eng}; jax {' '.join(f'{t}:{ref[t]:.3f}' for t in np.argsort(-ref)[:3])})")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"worst {worst:.4f} (tolerance {args.tol})")
    return 0 if worst <= args.tol else 1


def lora_logits(hp, w, lp, toks, idx):
    x, _ = _fns(hp)["body"](w, lp, toks)
    return _fns(hp)["logits_at"](w, x, idx)


def icarus_logits(hp, w, lp, toks, idx):
    return _fns(hp)["icarus"](w, lp, toks, idx)


_CACHE = {}


def _fns(hp):
    """The forward pieces of train_roles.make_fns, exposed for logits."""
    if not _CACHE:
        _CACHE.update(tr.make_fns(hp, expose=True))
    return _CACHE


if __name__ == "__main__":
    sys.exit(main())
