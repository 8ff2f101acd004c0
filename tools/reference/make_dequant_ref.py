#!/usr/bin/env python3
"""Reference fixtures for the C++ format tests (tests/unit/format/).

Independent implementation: the PyPI `gguf` package (gguf-py from llama.cpp),
its own dequantizer `gguf.quants.dequantize` and its own `GGUFReader`.

Writes:
  tests/data/format/dequant_ref.json
      deterministic random blocks of every type agentkv dequantizes, with the
      f32 values gguf-py dequantizes them to (both as hex of little-endian
      bytes), plus gguf-py's table of block sizes (GGML_QUANT_SIZES).
  tests/data/format/smollm2_ref.json   (only if the model file exists)
      what GGUFReader sees in the default model: header, every key with its
      type and (a prefix of) its value, every tensor's name/type/shape/offset,
      and for one tensor of each type the first 64 dequantized values and the
      float64 sum of all of them.

How it was run (from the repository root; gguf 0.19.0, numpy 2.4.6, Python 3.11):
  python3 tools/reference/make_dequant_ref.py
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT_DIR = os.path.join(ROOT, "tests", "data", "format")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

# type -> (number of blocks, byte offsets of the f16 scale fields in a block)
CASES = {
    T.F32: (64, []),
    T.F16: (256, []),
    T.BF16: (256, []),
    T.Q4_0: (16, [0]),
    T.Q4_1: (16, [0, 2]),
    T.Q5_0: (16, [0]),
    T.Q5_1: (16, [0, 2]),
    T.Q8_0: (16, [0]),
    T.Q4_K: (6, [0, 2]),
    T.Q5_K: (6, [0, 2]),
    T.Q6_K: (6, [208]),
}


def random_bytes(rng, qtype, n_blocks, scale_offsets):
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    if qtype == T.F32:
        vals = (rng.standard_normal(n_blocks) * 10.0 ** rng.integers(-6, 6, n_blocks)).astype(np.float32)
        return vals.tobytes()
    if qtype in (T.F16, T.BF16):
        bits = rng.integers(0, 1 << 16, n_blocks, dtype=np.uint32).astype(np.uint16)
        exp_mask = np.uint16(0x7C00 if qtype == T.F16 else 0x7F80)
        # No inf/NaN: clear the top exponent bit where the exponent is all ones.
        top = np.uint16(0x4000)
        bits = np.where((bits & exp_mask) == exp_mask, bits & ~top, bits).astype(np.uint16)
        # A few exact subnormals and zeros for the f16 edge cases.
        bits[:4] = np.array([0x0000, 0x8000, 0x0001, 0x83FF], dtype=np.uint16)
        return bits.tobytes()
    raw = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint32).astype(np.uint8)
    for off in scale_offsets:
        # Finite, normal-range scales of both signs.
        scales = (rng.uniform(-2.0, 2.0, n_blocks) * 10.0 ** rng.integers(-3, 1, n_blocks)).astype(np.float16)
        raw[:, off:off + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return raw.tobytes()


def make_dequant_ref():
    rng = np.random.default_rng(20261122)
    cases = []
    for qtype, (n_blocks, scale_offsets) in CASES.items():
        block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
        data = random_bytes(rng, qtype, n_blocks, scale_offsets)
        arr = np.frombuffer(data, dtype=np.uint8).reshape(n_blocks, block_bytes)
        if qtype == T.F32:
            expected = np.frombuffer(data, dtype=np.float32)
        else:
            expected = gguf.quants.dequantize(arr, qtype).astype(np.float32).reshape(-1)
        assert expected.size == n_blocks * block_elems
        assert np.all(np.isfinite(expected)), qtype.name
        cases.append({
            "type": qtype.name.lower().replace("_k", "_K"),
            "type_id": int(qtype),
            "n": int(expected.size),
            "data_hex": data.hex(),
            "expected_f32_hex": expected.astype("<f4").tobytes().hex(),
        })
    sizes = [{"type_id": int(t), "name": t.name, "block_elems": be, "block_bytes": bb}
             for t, (be, bb) in GGML_QUANT_SIZES.items()]
    return {"generator": "tools/reference/make_dequant_ref.py", "gguf_py_version": gguf_version(),
            "cases": cases, "quant_sizes": sizes}


def gguf_version():
    try:
        from importlib.metadata import version
        return version("gguf")
    except Exception:
        return "unknown"


def field_value(field, limit):
    """(type name, value or list prefix, array length) as GGUFReader decodes it."""
    vtype = field.types[0]
    if vtype == gguf.GGUFValueType.ARRAY:
        elem = field.types[1] if len(field.types) > 1 else None
        n = len(field.data)
        items = [field.parts[i] for i in field.data[:limit]]
        if elem == gguf.GGUFValueType.STRING:
            vals = [bytes(x).decode("utf-8", errors="surrogateescape") for x in items]
        else:
            vals = [x.tolist()[0] for x in items]
        return {"type": "array", "elem_type": elem.name.lower(), "length": n, "prefix": vals}
    part = field.parts[field.data[0]]
    if vtype == gguf.GGUFValueType.STRING:
        return {"type": "string", "value": bytes(part).decode("utf-8", errors="surrogateescape")}
    return {"type": vtype.name.lower(), "value": part.tolist()[0]}


def make_model_ref():
    r = gguf.GGUFReader(MODEL)
    kvs = []
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue
        kvs.append({"key": key, **field_value(field, 8)})
    tensors = []
    for t in r.tensors:
        tensors.append({"name": t.name, "type_id": int(t.tensor_type), "ne": [int(x) for x in t.shape],
                        "abs_offset": int(t.data_offset), "n_bytes": int(t.n_bytes)})
    samples = []
    seen = set()
    for t in r.tensors:
        if t.tensor_type in seen:
            continue
        seen.add(t.tensor_type)
        vals = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        samples.append({"name": t.name, "first_f32_hex": vals[:64].astype("<f4").tobytes().hex(),
                        "sum": float(vals.astype(np.float64).sum())})
    return {"generator": "tools/reference/make_dequant_ref.py", "gguf_py_version": gguf_version(),
            "file": os.path.basename(MODEL), "version": int(r.fields["GGUF.version"].parts[-1][0]),
            "alignment": int(r.alignment), "data_offset": int(r.data_offset), "kvs": kvs,
            "tensors": tensors, "dequant_samples": samples}


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "dequant_ref.json"), "w") as f:
        json.dump(make_dequant_ref(), f, indent=1)
    if os.path.exists(MODEL):
        with open(os.path.join(OUT_DIR, "smollm2_ref.json"), "w", encoding="utf-8") as f:
            json.dump(make_model_ref(), f, indent=1, ensure_ascii=True)
    else:
        print(f"{MODEL} not found: skipped smollm2_ref.json", file=sys.stderr)


if __name__ == "__main__":
    main()
