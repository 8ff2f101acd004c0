#!/usr/bin/env python3
"""PEFT LoRA directory -> llama.cpp GGUF LoRA, written the way llama.cpp's
convert_lora_to_gguf.py writes it, but with numpy and the `gguf` package only
(no torch, no transformers, none of agentkv's code): an independent reference
for agentkv's two adapter loaders.

What llama.cpp's converter does, and this script does too:
  * general.type = "adapter", adapter.type = "lora", general.architecture =
    the base's, adapter.lora.alpha = lora_alpha (f32),
    adapter.alora.invocation_tokens = alora_invocation_tokens (u32 array) if set;
  * tensors "blk.{i}.{attn_q,...}.weight.lora_a" = lora_A (r, d_in) and
    ".lora_b" = lora_B (d_out, r), as numpy arrays (ggml ne reversed);
  * for llama/mistral, LlamaModel.permute on q_proj / k_proj, which on a
    LoraTorchTensor permutes the rows of B only:
      B.reshape(n_head, 2, rows // n_head // 2, r).swapaxes(1, 2).reshape(B.shape)
    with n_head = head_count for q and head_count_kv for k.
Instead of the HF config.json it reads the base hyper-parameters from the
base GGUF (--base). Output is f32 (llama.cpp's default --outtype).

Refused, because llama.cpp's format cannot express them (its converter writes
a silently wrong scale): use_rslora, alpha_pattern.

  python tools/adapters/peft_to_gguf.py --base models/x.gguf --outfile a.gguf ADAPTER_DIR
"""
import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np
import gguf

PEFT_TO_GGUF = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
PERMUTED_ARCHS = ("llama", "mistral")  # convert_hf_to_gguf LlamaModel (adjacent-pair RoPE)


def read_safetensors(path):
    """name -> float32 array (F32, F16, BF16), plus the __metadata__ dict."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        buf = data[begin:end]
        shape = tuple(info["shape"])
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif dt == "F16":
            a = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif dt == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{name}: dtype {dt} not supported")
        out[name] = a.reshape(shape).copy()
    return out, header.get("__metadata__", {})


def permute(w, n_head):
    """convert_hf_to_gguf.py LlamaModel.permute, on the rows of w."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def base_params(base_path):
    r = gguf.GGUFReader(str(base_path))

    def field(key):
        f = r.fields[key]
        return f.parts[f.data[0]]

    arch = bytes(field("general.architecture")).decode()
    n_head = int(field(f"{arch}.attention.head_count")[0])
    n_kv = int(field(f"{arch}.attention.head_count_kv")[0]) if f"{arch}.attention.head_count_kv" in r.fields else n_head
    return arch, n_head, n_kv


def convert(adapter_dir, base_path, out_path):
    adapter_dir = Path(adapter_dir)
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    if cfg.get("peft_type") != "LORA":
        raise ValueError("only peft_type LORA")
    if cfg.get("use_rslora"):
        raise ValueError("use_rslora: the GGUF format has no way to say alpha / sqrt(r)")
    if cfg.get("alpha_pattern"):
        raise ValueError("alpha_pattern: the GGUF format has one alpha per file")
    tensors, _ = read_safetensors(adapter_dir / "adapter_model.safetensors")
    arch, n_head, n_kv = base_params(base_path)

    pairs = {}
    for name, t in tensors.items():
        if name.endswith(".lora_A.weight"):
            base, which = name[: -len(".lora_A.weight")], "A"
        elif name.endswith(".lora_B.weight"):
            base, which = name[: -len(".lora_B.weight")], "B"
        else:
            raise ValueError(f"unexpected tensor {name}")
        base = base.replace("base_model.model.", "", 1)  # get_base_tensor_name
        pairs.setdefault(base, {})[which] = t

    w = gguf.GGUFWriter(str(out_path), arch)
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_name(cfg.get("base_model_name_or_path") or "adapter")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(cfg.get("lora_alpha", 8)))
    tokens = cfg.get("alora_invocation_tokens")
    if tokens:
        w.add_key_value(gguf.Keys.Adapter.ALORA_INVOCATION_TOKENS, [int(t) for t in tokens],
                        gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT32)
    for base, ab in pairs.items():
        # model.layers.{i}.{self_attn|mlp}.{x}_proj
        parts = base.split(".")
        if len(parts) != 5 or parts[:2] != ["model", "layers"]:
            raise ValueError(f"unexpected module {base}")
        module = ".".join(parts[3:])
        if module not in PEFT_TO_GGUF:
            raise ValueError(f"unsupported target module {module}")
        if "A" not in ab or "B" not in ab:
            raise ValueError(f"{base}: lora_A or lora_B missing")
        a, b = ab["A"].astype(np.float32), ab["B"].astype(np.float32)
        if arch in PERMUTED_ARCHS and module == "self_attn.q_proj":
            b = permute(b, n_head)
        elif arch in PERMUTED_ARCHS and module == "self_attn.k_proj":
            b = permute(b, n_kv)
        name = f"blk.{int(parts[2])}.{PEFT_TO_GGUF[module]}.weight"
        w.add_tensor(name + ".lora_a", np.ascontiguousarray(a))
        w.add_tensor(name + ".lora_b", np.ascontiguousarray(b))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="base model GGUF (architecture and head counts)")
    p.add_argument("--outfile", required=True, help="output .gguf")
    p.add_argument("adapter_dir", help="PEFT directory: adapter_config.json + adapter_model.safetensors")
    args = p.parse_args()
    try:
        convert(args.adapter_dir, args.base, args.outfile)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print(f"wrote {args.outfile}")


if __name__ == "__main__":
    main()
