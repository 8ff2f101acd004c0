"""The engine's final-position logits against the independent numpy reference
(tools/reference/llama_ref.py: gguf-py dequantization, float64 arithmetic).

For each prompt the reference computes the logits of the last position, the
engine writes its own with `agentkv logits --out` (raw little-endian float32),
and the two must agree to max|a-b| / max|b| <= 1e-4. The reference itself is
guarded by a greedy answer that must mention Paris.

The engine runs with an f32 KV cache for that bound. With an f16 or bf16 cache
(the engine's default is f16) every K and V element is rounded once more, by
up to half a unit in the last place u (f16: 2^-11, bf16: 2^-8); those runs are
held to 4u, from a measured worst of about 1.1u (HALF_KV_TOL below). Rounding
the reference's K and V the same way does not bring it closer (measured
3.3e-4 against 2.4e-4 unrounded on "long"): the engine's f32 K and the
reference's f64 K fall on different sides of f16 rounding boundaries, and
from the first layers on the two runs' roundings are independent.
"""
import subprocess

import numpy as np
import pytest

import llama_ref

REL_TOL = 1e-4

SHORT = "The quick brown fox"

CODE = '''def fibonacci(n: int) -> list[int]:
    """Return the first n Fibonacci numbers."""
    seq = [0, 1]
    while len(seq) < n:
        seq.append(seq[-1] + seq[-2])
    return seq[:n]


if __name__ == "__main__":
    print(fibonacci(10))
'''

LONG = """The history of maps is as old as the history of travel. Long before anyone \
could write, people scratched the shapes of rivers, hills and hunting grounds into \
bone, clay and stone, so that others could follow the same paths. The oldest \
surviving examples are small and local: a plan of a village, the bend of a stream, \
a cluster of huts drawn from above as if by a bird. What they share with every map \
made since is a choice about what to leave out. A map that showed everything would \
be as large as the land itself and just as hard to read.

Greek scholars were the first to ask how the whole known world could be drawn on a \
single sheet. Eratosthenes, working in Alexandria in the third century before the \
common era, estimated the circumference of the Earth by comparing the angle of the \
noon sun in two cities a known distance apart. His figure was remarkably close to \
the modern one. Three centuries later Ptolemy collected the coordinates of some \
eight thousand places and described how to project a curved surface onto a flat \
one, a problem that every mapmaker has faced ever since. His Geography was copied \
by hand for more than a thousand years, and when it reached Western Europe again in \
the fifteenth century it changed the way educated people imagined the world.

Medieval maps served other purposes. Many placed Jerusalem at the centre and filled \
the edges with monsters, legends and the names of biblical peoples. Sailors in the \
Mediterranean, meanwhile, relied on portolan charts: careful drawings of coastlines \
crossed by a web of compass lines, made from the experience of pilots rather than \
from theory. These charts were practical tools, stained by salt water and often \
replaced, and they were accurate enough to guide a ship from one harbour to another.

The age of ocean voyages demanded better methods. In 1569 Gerardus Mercator \
published a projection on which a line of constant compass bearing appears as a \
straight line. Navigators loved it, even though it stretches the lands near the \
poles to enormous size. Measuring longitude at sea remained a dangerous puzzle \
until the eighteenth century, when John Harrison built clocks that kept time on a \
rolling deck, so that a captain could compare local noon with the time at home.

Today satellites measure the shape of the planet to within centimetres, and the \
maps in our pockets redraw themselves as we walk. Yet the old questions remain. \
Every map is still a projection, still a selection, and still an argument about \
what matters. A good map is honest about its choices, and a careful reader \
remembers that the paper, or the screen, is never the territory itself."""

PROMPTS = {
    "short": lambda: SHORT,
    "chat": lambda: llama_ref.chatml("What is the capital of France?"),
    "code": lambda: CODE,
    "long": lambda: LONG,
}


def run_engine(engine_path, model_path, ids, out, threads=2, decode_from=None, kv_dtype="f32",
               act_quant="f32"):
    cmd = [str(engine_path), "logits", "-m", str(model_path), "-t", str(threads),
           "--tokens", ",".join(map(str, ids)), "--out", str(out), "--kv-dtype", kv_dtype,
           "--act-quant", act_quant]
    if decode_from is not None:
        cmd += ["--decode-from", str(decode_from)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{' '.join(cmd[:4])} ... failed:\n{r.stderr}"
    return np.fromfile(out, dtype="<f4")


@pytest.fixture(scope="module")
def prompt_ids(ref_tokenizer):
    ids = {name: llama_ref.encode(ref_tokenizer, make()) for name, make in PROMPTS.items()}
    ids["single"] = [1]  # one token, the <|im_start|> control id: no attention context
    return ids


def test_prompt_set_covers_lengths(prompt_ids):
    assert len(prompt_ids["long"]) >= 512
    assert len(prompt_ids["short"]) <= 8
    assert prompt_ids["chat"][0] == 1  # <|im_start|> matched as one control token


@pytest.mark.parametrize("name", ["single", "short", "chat", "code", "long"])
def test_engine_logits_match_reference(name, prompt_ids, ref_model, engine_path, model_path, tmp_path):
    ids = prompt_ids[name]
    ref = llama_ref.forward(ref_model, ids)
    got = run_engine(engine_path, model_path, ids, tmp_path / "logits.f32")
    assert got.shape == ref.shape, f"engine wrote {got.size} values, expected n_vocab={ref.size}"
    assert np.all(np.isfinite(got))
    abs_err = float(np.max(np.abs(got - ref)))
    rel_err = abs_err / float(np.max(np.abs(ref)))
    top1_ref, top1_got = int(np.argmax(ref)), int(np.argmax(got))
    print(f"{name}: {len(ids)} tokens, max abs err {abs_err:.3e}, max rel err {rel_err:.3e}, "
          f"top-1 ref {top1_ref} engine {top1_got}")
    assert rel_err <= REL_TOL, f"{name}: max rel err {rel_err:.3e} > {REL_TOL} (abs {abs_err:.3e})"
    # Implied by the tolerance unless the two best logits are nearly tied.
    top2 = np.sort(ref)[-2:]
    if top2[1] - top2[0] > 2 * abs_err:
        assert top1_got == top1_ref


def rel_err(got, ref):
    return float(np.max(np.abs(got - ref))) / float(np.max(np.abs(ref)))


# 4u. Measured 2026-11-25 (SmolLM2 Q4_1, the prompts below): f16 5.6e-4
# ("chat") and 2.4e-4 ("long"), bf16 2.9e-3 and 2.4e-3.
HALF_KV_TOL = {"f16": 4 * 2.0**-11, "bf16": 4 * 2.0**-8}


@pytest.mark.parametrize("kv_dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", ["chat", "long"])
def test_engine_logits_with_half_kv(name, kv_dtype, prompt_ids, ref_model, engine_path, model_path, tmp_path):
    ids = prompt_ids[name]
    ref = llama_ref.forward(ref_model, ids)
    got = run_engine(engine_path, model_path, ids, tmp_path / "logits.f32", kv_dtype=kv_dtype)
    err = rel_err(got, ref)
    print(f"{name} {kv_dtype} KV: max rel err {err:.3e} (bound {HALF_KV_TOL[kv_dtype]:.1e}, f32 KV: <= {REL_TOL})")
    assert err <= HALF_KV_TOL[kv_dtype], f"{name} {kv_dtype}: max rel err {err:.3e}"
    # The option took effect: f32 KV stays below 1e-5 on these prompts.
    assert err > 1e-5, f"{name} {kv_dtype}: {err:.1e}, as close as f32 KV: was the cache rounded?"


# --act-quant q8 rounds the input of every q4_0/q4_1/q8_0 product to 8-bit
# blocks, as llama.cpp does. On SmolLM2 that rounding alone, applied in the
# float64 reference (llama_ref.forward(act_q8=True)), moves the logits by
# 1.7e-2 to 6.9e-2 (max rel), and the engine's q8 logits sit at 0.57x to 1.43x
# of that distance from the exact reference (measured 2026-11-26 on the Q4_0,
# Q4_1 and Q8_0 files, prompts chat/code/long, 1 and 2 threads; the "chat"
# top-1 flips, its two best logits being 0.08 apart, and the float64 q8
# reference flips it too). Held to 2x the rule's own distance.
@pytest.mark.parametrize("name", ["chat", "long"])
def test_engine_logits_with_q8_activations(name, prompt_ids, ref_model, engine_path, model_path, tmp_path):
    ids = prompt_ids[name]
    ref = llama_ref.forward(ref_model, ids)
    rule = rel_err(llama_ref.forward(ref_model, ids, act_q8=True), ref)
    got = run_engine(engine_path, model_path, ids, tmp_path / "logits.f32", act_quant="q8")
    err = rel_err(got, ref)
    print(f"{name} q8 activations: max rel err {err:.3e}; the rule in float64: {rule:.3e}")
    assert err <= 2 * rule, f"{name}: q8 logits {err:.3e} from the reference, the rule itself {rule:.3e}"
    assert err > 10 * REL_TOL, f"{name}: {err:.1e}, as close as f32 activations: did the option take effect?"


def test_engine_decode_steps_match_reference(prompt_ids, ref_model, engine_path, model_path, tmp_path):
    """Prefill part of the prompt, then one token per step through the paged KV
    cache (block boundaries included): the final logits still match."""
    ids = prompt_ids["code"]
    ref = llama_ref.forward(ref_model, ids)
    got = run_engine(engine_path, model_path, ids, tmp_path / "logits.f32", decode_from=len(ids) - 40)
    rel_err = float(np.max(np.abs(got - ref))) / float(np.max(np.abs(ref)))
    print(f"decode path: {len(ids)} tokens, last 40 one per step, max rel err {rel_err:.3e}")
    assert rel_err <= REL_TOL


def test_reference_answers_paris(ref_model, ref_tokenizer):
    """Guards the reference itself: greedy decoding of the demo question."""
    ids = llama_ref.encode(ref_tokenizer, llama_ref.chatml("What is the capital of France?"))
    eos = int(ref_model.reader.fields["tokenizer.ggml.eos_token_id"].contents())
    new = llama_ref.greedy(ref_model, ids, 16, stop={eos})
    text = ref_tokenizer.decode(new)
    assert "Paris" in text, text


def test_reference_kv_cache_matches_full_recompute(ref_model, prompt_ids):
    """Incremental (cached) reference evaluation equals one-shot evaluation,
    so the greedy guard above exercises the same forward the logits test uses."""
    ids = prompt_ids["code"]
    full = llama_ref.forward(ref_model, ids, all_positions=True)
    cache = llama_ref.KvCache(ref_model.hp.n_layer)
    half = len(ids) // 2
    first = llama_ref.forward(ref_model, ids[:half], cache, all_positions=True)
    second = llama_ref.forward(ref_model, ids[half:], cache, all_positions=True)
    inc = np.concatenate([first, second])
    assert np.max(np.abs(inc - full)) <= 1e-9 * np.max(np.abs(full))


# gemma3: 3 layers with a window of 16 and one global layer in 3 (local,
# local, global), global RoPE base 1e6 against the local default 10000, so
# the 70-token prompt crosses the window and each layer's base matters.
GEMMA_SYNTH = ["--sliding-window", "16", "--swa-pattern", "3", "--rope-base", "1000000"]


@pytest.mark.parametrize("arch,qtype", [("llama", "q8_0"), ("mistral", "f16"), ("qwen2", "f32"), ("qwen3", "q8_0"),
                                        ("gemma3", "q8_0"), ("gemma3", "f32")])
def test_synthetic_architectures_match_reference(arch, qtype, engine_path, model_path, tmp_path):
    """Every supported architecture (NeoX RoPE, q/k/v biases, q/k norm, untied
    output; Gemma 3's scaled embeddings, post-norms, GeGLU and sliding-window
    layers with their own RoPE base) on a small random-weight model written by
    `agentkv synth-model`."""
    path = tmp_path / f"{arch}.gguf"
    cmd = [str(engine_path), "synth-model", "-o", str(path), "--arch", arch, "--layers",
           "3" if arch == "gemma3" else "2", "--d-model", "128",
           "--heads", "4", "--kv-heads", "2", "--ffn", "256", "--type", qtype, "--init-std", "0.1",
           "--vocab-from", str(model_path), "--seed", "3"] + (["--untied"] if arch == "mistral" else [])
    if arch == "gemma3":
        cmd += GEMMA_SYNTH
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    model = llama_ref.Model(str(path))
    ids = [int(x) for x in np.random.default_rng(5).integers(0, 49152, size=70)]
    ref = llama_ref.forward(model, ids)
    got = run_engine(engine_path, path, ids, tmp_path / "logits.f32", decode_from=60)
    rel_err = float(np.max(np.abs(got - ref))) / float(np.max(np.abs(ref)))
    print(f"{arch}/{qtype}: max rel err {rel_err:.3e}")
    assert rel_err <= REL_TOL


def test_synthetic_gemma_window_and_bases_matter(engine_path, model_path, tmp_path):
    """The synthetic Gemma test above can fail: the reference without the
    window, or with the global base on every layer, is far from the engine."""
    path = tmp_path / "gemma3.gguf"
    cmd = [str(engine_path), "synth-model", "-o", str(path), "--arch", "gemma3", "--layers", "3", "--d-model", "128",
           "--heads", "4",
           "--kv-heads", "2", "--ffn", "256", "--type", "f32", "--init-std", "0.1", "--vocab-from", str(model_path),
           "--seed", "3"] + GEMMA_SYNTH
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    model = llama_ref.Model(str(path))
    assert model.hp.local == [True, True, False] and model.hp.window == 16
    ids = [int(x) for x in np.random.default_rng(5).integers(0, 49152, size=70)]
    got = run_engine(engine_path, path, ids, tmp_path / "logits.f32")
    ref = llama_ref.forward(model, ids)
    assert rel_err(got, ref) <= REL_TOL
    model.hp.window = 0
    assert rel_err(got, llama_ref.forward(model, ids)) > 100 * REL_TOL
    model.hp.window = 16
    model.hp.rope_base_local = model.hp.rope_base
    assert rel_err(got, llama_ref.forward(model, ids)) > 100 * REL_TOL
