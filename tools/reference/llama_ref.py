#!/usr/bin/env python3
"""Independent reference forward pass of a Llama-family decoder, in numpy.

Shares no code with the engine: weights are read with the PyPI `gguf` package
(gguf.GGUFReader) and dequantized with gguf-py's own `gguf.quants.dequantize`;
the tokenizer is the HF `tokenizers` library built from the GGUF vocabulary and
merges. All arithmetic runs in float64 by default (float32 on request), so the
engine's float32 logits can be compared against it.

Architectures (what the GGUF declares in general.architecture):
  llama, mistral   "normal" RoPE: rotates adjacent pairs (x[2i], x[2i+1]). The
                   GGUF converter permutes HF's q/k rows so that this equals
                   HF's rotate_half on the original weights.
  qwen2            NeoX RoPE: rotates (x[i], x[i + n_rot/2]); q/k/v biases.
  qwen3            NeoX RoPE; RMSNorm over each head of q and k before RoPE.
  gemma3           NeoX RoPE and q/k norms as qwen3; embeddings times
                   sqrt(d_model); RMSNorms on the attention and FFN outputs
                   before each joins the residual (post_attention_norm,
                   post_ffw_norm); GeGLU with tanh GELU; sliding-window
                   layers (attention.sliding_window; sliding_window_pattern,
                   period 6 by default: layer l is local when l % 6 < 5) whose
                   query at p sees keys p-W+1..p, with their own RoPE base
                   (rope.freq_base_swa, default 10000); the file's norm
                   weights already hold Gemma's 1 + w. As llama.cpp's
                   src/models/gemma3.cpp reads the same keys.
Tied output: without output.weight the logits use token_embd.weight.
final_logit_softcapping c, where present: logits c * tanh(z / c).

Shapes: GGUFReader reports ggml `ne` order (ne[0] fastest). A Linear weight
with ne = [in, out] is a row-major numpy array [out, in], so y = x @ W.T.

CLI (run from anywhere; needs numpy, gguf, tokenizers):
  python3 tools/reference/llama_ref.py --model M --tokens 1,2,3 --out logits.npy
  python3 tools/reference/llama_ref.py --model M --chat "What is the capital of France?" --generate 16
  python3 tools/reference/llama_ref.py --model M --prompt TEXT --print-tokens
--out writes the final-position logits (shape [n_vocab]); with --all-positions
every position's ([n_tokens, n_vocab]). A name ending in .npy is written with
numpy.save (float64), any other name as raw little-endian float32.
"""
import argparse
import sys
import time

import numpy as np
import gguf
from gguf.quants import dequantize

NORMAL_ROPE_ARCHS = {"llama", "mistral"}
NEOX_ROPE_ARCHS = {"qwen2", "qwen3", "gemma3"}

SMOLLM_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(user, system=SMOLLM_SYSTEM):
    """The ChatML prompt SmolLM2's chat template produces for one user turn."""
    return (f"<|im_start|>system\n{system}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


class Hparams:
    def __init__(self, reader):
        arch = _field(reader, "general.architecture")
        if arch not in NORMAL_ROPE_ARCHS | NEOX_ROPE_ARCHS:
            raise ValueError(f"unsupported architecture {arch!r}")
        self.arch = arch

        def a(key, default=None):
            v = _field(reader, f"{arch}.{key}", default)
            if v is None:
                raise ValueError(f"missing {arch}.{key}")
            return v

        self.n_layer = int(a("block_count"))
        self.d_model = int(a("embedding_length"))
        self.d_ffn = int(a("feed_forward_length"))
        self.n_head = int(a("attention.head_count"))
        self.n_head_kv = int(a("attention.head_count_kv", self.n_head))
        self.head_dim = int(a("attention.key_length", self.d_model // self.n_head))
        self.n_rot = int(a("rope.dimension_count", self.head_dim))
        self.rope_base = float(a("rope.freq_base", 10000.0))
        self.eps = float(a("attention.layer_norm_rms_epsilon"))
        self.neox = arch in NEOX_ROPE_ARCHS
        scaling = _field(reader, f"{arch}.rope.scaling.type", "none")
        self.rope_linear = 1.0
        if scaling == "linear":
            self.rope_linear = float(a("rope.scaling.factor"))
        elif scaling not in ("none", None):
            raise ValueError(f"rope scaling {scaling!r} not supported by the reference")
        if self.n_head % self.n_head_kv:
            raise ValueError("head_count is not a multiple of head_count_kv")
        self.gemma = arch == "gemma3"
        self.attn_scale = 1.0 / np.sqrt(self.head_dim)
        self.embed_scale = np.sqrt(np.float32(self.d_model)) if self.gemma else 1.0
        self.softcap = float(a("final_logit_softcapping", 0.0))
        self.window = 0
        self.local = [False] * self.n_layer
        self.rope_base_local = 10000.0
        if self.gemma:
            if self.n_layer == 62:  # 27B: query_pre_attn_scalar = d_model / n_head
                self.attn_scale = 1.0 / np.sqrt(self.d_model // self.n_head)
            self.window = int(a("attention.sliding_window", 0))
            if self.window > 0:
                pat = a("attention.sliding_window_pattern", 6)
                if isinstance(pat, (list, tuple)):
                    self.local = [bool(x) for x in pat]
                else:
                    n = int(pat)
                    self.local = [n == 0 or il % n < n - 1 for il in range(self.n_layer)]
                self.rope_base_local = float(a("rope.freq_base_swa", 10000.0))


class Model:
    """Dequantized weights (in `dtype`) and hyper-parameters of one GGUF file."""

    def __init__(self, path, dtype=np.float64):
        self.dtype = np.dtype(dtype)
        reader = gguf.GGUFReader(path)
        self.reader = reader
        self.hp = Hparams(reader)
        self.tensors = {t.name: t for t in reader.tensors}
        hp = self.hp
        self.tok_embd = self._w("token_embd.weight", (None, hp.d_model))
        self.n_vocab = self.tok_embd.shape[0]
        self.output_norm = self._w("output_norm.weight", (hp.d_model,))
        self.output = (self._w("output.weight", (self.n_vocab, hp.d_model))
                       if "output.weight" in self.tensors else self.tok_embd)
        out_name = "output.weight" if "output.weight" in self.tensors else "token_embd.weight"
        # GGUF types of the product matrices (for act_q8 in forward).
        self.output_type = self.tensors[out_name].tensor_type
        # llama3-style per-dimension RoPE frequency divisors, if present.
        self.rope_freqs = (self._w("rope_freqs.weight", (hp.n_rot // 2,))
                           if "rope_freqs.weight" in self.tensors else None)
        qd, kvd = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
        self.layers = []
        for i in range(hp.n_layer):
            p = f"blk.{i}."
            L = {
                "attn_norm": self._w(p + "attn_norm.weight", (hp.d_model,)),
                "wq": self._w(p + "attn_q.weight", (qd, hp.d_model)),
                "wk": self._w(p + "attn_k.weight", (kvd, hp.d_model)),
                "wv": self._w(p + "attn_v.weight", (kvd, hp.d_model)),
                "wo": self._w(p + "attn_output.weight", (hp.d_model, qd)),
                "ffn_norm": self._w(p + "ffn_norm.weight", (hp.d_model,)),
                "w_gate": self._w(p + "ffn_gate.weight", (hp.d_ffn, hp.d_model)),
                "w_up": self._w(p + "ffn_up.weight", (hp.d_ffn, hp.d_model)),
                "w_down": self._w(p + "ffn_down.weight", (hp.d_model, hp.d_ffn)),
            }
            L["types"] = {k: self.tensors[p + n].tensor_type for k, n in (
                ("wq", "attn_q.weight"), ("wk", "attn_k.weight"), ("wv", "attn_v.weight"),
                ("wo", "attn_output.weight"), ("w_gate", "ffn_gate.weight"),
                ("w_up", "ffn_up.weight"), ("w_down", "ffn_down.weight"))}
            for name, shape in (("attn_q.bias", (qd,)), ("attn_k.bias", (kvd,)),
                                ("attn_v.bias", (kvd,)), ("attn_q_norm.weight", (hp.head_dim,)),
                                ("attn_k_norm.weight", (hp.head_dim,)),
                                ("post_attention_norm.weight", (hp.d_model,)),
                                ("post_ffw_norm.weight", (hp.d_model,))):
                if p + name in self.tensors:
                    L[name] = self._w(p + name, shape)
            self.layers.append(L)

    def _w(self, name, shape):
        t = self.tensors.get(name)
        if t is None:
            raise ValueError(f"missing tensor {name}")
        # ggml ne = [ne0, ne1, ...] with ne0 fastest -> numpy shape reversed.
        np_shape = tuple(int(n) for n in reversed(t.shape))
        w = dequantize(t.data, t.tensor_type).reshape(np_shape)
        if len(w.shape) != len(shape) or any(s is not None and s != n for s, n in zip(shape, w.shape)):
            raise ValueError(f"{name}: shape {w.shape}, expected {shape}")
        return np.ascontiguousarray(w, dtype=self.dtype)


class KvCache:
    """Post-RoPE K and V per layer, [n_head_kv, n_past, head_dim]."""

    def __init__(self, n_layer):
        self.k = [None] * n_layer
        self.v = [None] * n_layer

    @property
    def n_past(self):
        return 0 if self.k[0] is None else self.k[0].shape[1]

    def append(self, il, k, v):
        self.k[il] = k if self.k[il] is None else np.concatenate([self.k[il], k], axis=1)
        self.v[il] = v if self.v[il] is None else np.concatenate([self.v[il], v], axis=1)
        return self.k[il], self.v[il]


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, hp, rope_freqs, base=None, linear=None):
    """x: [..., T, head_dim]; pos: [T]. Rotates the first n_rot dims.
    base/linear: a layer's own RoPE base and linear factor (Gemma's local layers)."""
    n_rot = hp.n_rot
    half = n_rot // 2
    base = hp.rope_base if base is None else base
    linear = hp.rope_linear if linear is None else linear
    inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / n_rot)
    if rope_freqs is not None:
        inv_freq = inv_freq / rope_freqs.astype(np.float64)
    theta = (pos.astype(np.float64) / linear)[:, None] * inv_freq[None, :]  # [T, half]
    cos, sin = np.cos(theta).astype(x.dtype), np.sin(theta).astype(x.dtype)
    out = x.copy()
    if hp.neox:
        x0, x1 = x[..., :half], x[..., half:n_rot]
        out[..., :half] = x0 * cos - x1 * sin
        out[..., half:n_rot] = x0 * sin + x1 * cos
    else:
        x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = x0 * cos - x1 * sin
        out[..., 1:n_rot:2] = x0 * sin + x1 * cos
    return out


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    """HF's gelu_pytorch_tanh (Gemma's hidden_activation)."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


Q8_ACT_TYPES = (gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q4_1,
                gguf.GGMLQuantizationType.Q8_0)


def quantize_q8(x):
    """Rows of x rounded as the engine's --act-quant q8 (and llama.cpp's q8_0)
    rounds activations: per 32-value block d = max|x| / 127, q = round half to
    even of x / d, value q * d."""
    shape = x.shape
    b = x.reshape(-1, 32)
    d = np.abs(b).max(axis=1, keepdims=True) / 127.0
    q = np.rint(np.divide(b, d, out=np.zeros_like(b), where=d != 0))
    return (q * d).reshape(shape)


def forward(model, tokens, cache=None, all_positions=False, act_q8=False):
    """Runs `tokens` after what `cache` holds (positions n_past..). Returns the
    logits of the last token [n_vocab], or of every token [T, n_vocab].
    act_q8: the input of every product with q4_0, q4_1 or q8_0 weights is
    rounded by quantize_q8 first."""
    def mm(x, w, wtype):
        if act_q8 and wtype in Q8_ACT_TYPES:
            x = quantize_q8(x)
        return x @ w.T

    hp = model.hp
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.ndim != 1 or len(tokens) == 0:
        raise ValueError("tokens must be a non-empty 1-D list")
    if tokens.min() < 0 or tokens.max() >= model.n_vocab:
        raise ValueError("token id out of range")
    if cache is None:
        cache = KvCache(hp.n_layer)
    T = len(tokens)
    n_past = cache.n_past
    pos = np.arange(n_past, n_past + T)
    H, Hkv, hd = hp.n_head, hp.n_head_kv, hp.head_dim
    group = H // Hkv
    # Causal by position: query at n_past+i sees keys at positions <= n_past+i,
    # and on a sliding-window layer only the last `window` of them.
    kpos = np.arange(n_past + T)[None, :]
    mask = np.where(kpos <= pos[:, None], 0.0, -np.inf).astype(model.dtype)
    mask_local = mask
    if hp.window > 0:
        mask_local = np.where((kpos <= pos[:, None]) & (pos[:, None] - kpos < hp.window), 0.0,
                              -np.inf).astype(model.dtype)
    scale = hp.attn_scale

    x = model.tok_embd[tokens] * model.dtype.type(hp.embed_scale)  # [T, d]
    for il, L in enumerate(model.layers):
        local = hp.local[il]
        base, linear = (hp.rope_base_local, 1.0) if local else (None, None)
        h = rms_norm(x, L["attn_norm"], hp.eps)
        ty = L["types"]
        q = mm(h, L["wq"], ty["wq"])
        k = mm(h, L["wk"], ty["wk"])
        v = mm(h, L["wv"], ty["wv"])
        if "attn_q.bias" in L:
            q = q + L["attn_q.bias"]
            k = k + L["attn_k.bias"]
            v = v + L["attn_v.bias"]
        q = q.reshape(T, H, hd).transpose(1, 0, 2)     # [H, T, hd]
        k = k.reshape(T, Hkv, hd).transpose(1, 0, 2)   # [Hkv, T, hd]
        v = v.reshape(T, Hkv, hd).transpose(1, 0, 2)
        if "attn_q_norm.weight" in L:
            q = rms_norm(q, L["attn_q_norm.weight"], hp.eps)
            k = rms_norm(k, L["attn_k_norm.weight"], hp.eps)
        q = rope(q, pos, hp, None if local else model.rope_freqs, base, linear)
        k = rope(k, pos, hp, None if local else model.rope_freqs, base, linear)
        K, V = cache.append(il, k, v)                  # [Hkv, S, hd]
        # Query head j uses kv head j // group (GQA).
        qg = q.reshape(Hkv, group * T, hd)
        s = (qg @ K.transpose(0, 2, 1)).reshape(Hkv, group, T, -1) * scale + (mask_local if local else mask)
        s = s - s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=-1, keepdims=True)
        o = (p.reshape(Hkv, group * T, -1) @ V).reshape(H, T, hd)
        o = o.transpose(1, 0, 2).reshape(T, H * hd)
        a = mm(o, L["wo"], ty["wo"])
        if "post_attention_norm.weight" in L:
            a = rms_norm(a, L["post_attention_norm.weight"], hp.eps)
        x = x + a

        h = rms_norm(x, L["ffn_norm"], hp.eps)
        act = gelu_tanh if hp.gemma else silu
        f = act(mm(h, L["w_gate"], ty["w_gate"])) * mm(h, L["w_up"], ty["w_up"])
        f = mm(f, L["w_down"], ty["w_down"])
        if "post_ffw_norm.weight" in L:
            f = rms_norm(f, L["post_ffw_norm.weight"], hp.eps)
        x = x + f

    if not all_positions:
        x = x[-1:]
    x = rms_norm(x, model.output_norm, hp.eps)
    logits = mm(x, model.output, model.output_type)
    if hp.softcap > 0:
        logits = hp.softcap * np.tanh(logits / hp.softcap)
    return logits if all_positions else logits[0]


def greedy(model, prompt_tokens, n_new, stop=()):
    """Greedy decoding with a KV cache; returns the new token ids."""
    cache = KvCache(model.hp.n_layer)
    logits = forward(model, prompt_tokens, cache)
    out = []
    for _ in range(n_new):
        t = int(np.argmax(logits))
        out.append(t)
        if t in stop:
            break
        logits = forward(model, [t], cache)
    return out


# ---- tokenizer: HF `tokenizers` built from the GGUF vocabulary ---------------

def make_tokenizer(path_or_reader):
    """Byte-level BPE from tokenizer.ggml.{tokens,merges} with the pre-tokenizer
    the file declares (gpt2 and smollm only). Control tokens are matched whole."""
    from tokenizers import Tokenizer, AddedToken, decoders, models, pre_tokenizers

    r = path_or_reader if isinstance(path_or_reader, gguf.GGUFReader) else gguf.GGUFReader(path_or_reader)
    model_kind = _field(r, "tokenizer.ggml.model")
    pre = _field(r, "tokenizer.ggml.pre", "default")
    if model_kind != "gpt2" or pre not in ("smollm", "gpt2", "default"):
        raise ValueError(f"reference tokenizer supports gpt2 BPE with pre smollm/gpt2, not {model_kind}/{pre}")
    tokens = _field(r, "tokenizer.ggml.tokens")
    types = _field(r, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in _field(r, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        # SmolLM2 splits every digit on its own before the GPT-2 regex.
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    control = [t for t, ty in zip(tokens, types) if ty == gguf.TokenType.CONTROL]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    return tok


def encode(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False).ids


def compare_logits(ref, other):
    """One line: max abs / relative error, top-1 and top-5 agreement, KL(ref || other)."""
    ref = np.asarray(ref, dtype=np.float64)
    other = np.asarray(other, dtype=np.float64)
    if other.shape != ref.shape:
        return f"shape mismatch: {other.shape} vs reference {ref.shape}"
    abs_err = float(np.max(np.abs(other - ref)))
    lp = ref - ref.max() - np.log(np.sum(np.exp(ref - ref.max())))
    lq = other - other.max() - np.log(np.sum(np.exp(other - other.max())))
    kl = float(np.sum(np.exp(lp) * (lp - lq)))
    top5 = set(np.argsort(-ref)[:5]) == set(np.argsort(-other)[:5])
    return (f"max abs err {abs_err:.3e}, max rel err {abs_err / np.max(np.abs(ref)):.3e}, "
            f"top-1 ref {int(np.argmax(ref))} other {int(np.argmax(other))}, "
            f"same top-5 set {top5}, KL(ref||other) {kl:.3e}")


def _write_logits(path, logits):
    if path.endswith(".npy"):
        np.save(path, logits)
    else:
        np.asarray(logits, dtype="<f4").tofile(path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", "-m", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", help="comma-separated token ids")
    src.add_argument("--prompt", help="raw text (control tokens such as <|im_start|> are matched)")
    src.add_argument("--chat", help="one user message, wrapped in SmolLM2's ChatML prompt")
    ap.add_argument("--out", help="write logits here (.npy: float64 numpy; else raw f32 LE)")
    ap.add_argument("--all-positions", action="store_true", help="logits of every position")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--generate", type=int, default=0, help="greedy-decode N tokens and print them")
    ap.add_argument("--print-tokens", action="store_true")
    ap.add_argument("--compare", metavar="FILE",
                    help="raw f32 final-position logits of another implementation: print the differences")
    args = ap.parse_args(argv)

    t0 = time.time()
    model = Model(args.model, dtype=np.float64 if args.dtype == "float64" else np.float32)
    t_load = time.time() - t0
    tokenizer = None
    if args.tokens is not None:
        ids = [int(t) for t in args.tokens.split(",") if t.strip()]
    else:
        tokenizer = make_tokenizer(model.reader)
        ids = encode(tokenizer, args.prompt if args.prompt is not None else chatml(args.chat))
    if args.print_tokens:
        print(",".join(map(str, ids)))

    t0 = time.time()
    logits = forward(model, ids, all_positions=args.all_positions)
    t_fwd = time.time() - t0
    last = logits[-1] if args.all_positions else logits
    print(f"[llama_ref] {model.hp.arch} {len(ids)} tokens, load {t_load:.1f}s, forward {t_fwd:.1f}s, "
          f"top-1 {int(np.argmax(last))}", file=sys.stderr)
    if args.out:
        _write_logits(args.out, logits)
    if args.compare:
        print(compare_logits(last, np.fromfile(args.compare, dtype="<f4")))
    if args.generate:
        if tokenizer is None:
            tokenizer = make_tokenizer(model.reader)
        eos = _field(model.reader, "tokenizer.ggml.eos_token_id")
        stop = {int(eos)} if eos is not None else set()
        new = greedy(model, ids, args.generate, stop=stop)
        print(tokenizer.decode(new, skip_special_tokens=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
