"""Gemma 3 270M (the packaged Q4_K_M file, scripts/get_model.sh gemma3-270m)
against the independent numpy reference (tools/reference/llama_ref.py, which
reads gemma3 as llama.cpp's src/models/gemma3.cpp does: scaled embeddings,
q/k norms, post-attention and post-FFN norms, GeGLU, local layers with a
512-key window and RoPE base 10000, global ones at 1e6).

The prompts are tokenized by the engine; tests/data/gemma3_tokens.json holds
llama.cpp's ids for a corpus (scripts/check_vs_llamacpp.py --tokens-out), and
the engine must give the same ones. Logits use an f32 KV cache and f32
activations, held to the bound test_logits.py uses for SmolLM2 (1e-4
relative; measured here about 1e-6). The "long" prompt is past the window, so
its local layers drop keys: without the window the reference is far off.
"""
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

import llama_ref
from test_logits import LONG, REL_TOL, HALF_KV_TOL, rel_err, run_engine

ROOT = Path(__file__).resolve().parents[2]
GEMMA = ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"
TOKENS = ROOT / "tests" / "data" / "gemma3_tokens.json"


@pytest.fixture(scope="module")
def gemma_path():
    if not GEMMA.exists():
        pytest.skip(f"{GEMMA} missing (scripts/get_model.sh gemma3-270m)")
    return GEMMA


@pytest.fixture(scope="module")
def gemma_ref(gemma_path):
    return llama_ref.Model(str(gemma_path))


def tokenize(engine_path, model, text):
    r = subprocess.run([str(engine_path), "tokenize", "-m", str(model), "--text=" + text], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.replace(",", " ").split()]


@pytest.fixture(scope="module")
def ref_logits(gemma_ref):
    """llama_ref.forward of a prompt, once per module (the long one takes a while in float64)."""
    cache = {}

    def get(ids):
        key = tuple(ids)
        if key not in cache:
            cache[key] = llama_ref.forward(gemma_ref, ids)
        return cache[key]
    return get


@pytest.fixture(scope="module")
def prompts(engine_path, gemma_path):
    ids = {
        "short": tokenize(engine_path, gemma_path, "The capital of France is"),
        "code": tokenize(engine_path, gemma_path, "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):"),
        # 526 tokens once: twice is past two windows.
        "long": tokenize(engine_path, gemma_path, LONG + "\n\n" + LONG),
    }
    return ids


def test_prompts_cover_the_window(prompts, gemma_ref):
    assert gemma_ref.hp.window == 512
    assert gemma_ref.hp.local == [il % 6 < 5 for il in range(18)]
    assert len(prompts["long"]) > 1024, "the long prompt must reach past two 512-key windows"
    assert all(p[0] == 2 for p in prompts.values()), "Gemma adds <bos> (id 2)"


def test_tokenizer_matches_llamacpp(serve_binary, engine_path, gemma_path):
    """The engine's ids equal llama.cpp's (llama-server /tokenize, recorded by
    scripts/check_vs_llamacpp.py --tokens-out) on every text of the tokenizer
    corpus, through `agentkv serve`'s /tokenize (BOS added, control-token text
    parsed: what `agentkv tokenize` gives, checked on two texts)."""
    import server_util
    data = json.loads(TOKENS.read_text())
    assert data["model"] == GEMMA.name and len(data["texts"]) >= 300
    s = server_util.Server(serve_binary, gemma_path, (), threads=server_util.env_threads())
    try:
        bad = []
        for item in data["texts"]:
            status, body = s.post_json("/tokenize", {"prompt": item["text"], "add_special_tokens": True})
            assert status == 200, body
            got = json.loads(body)["tokens"]
            if got != item["ids"]:
                bad.append((item["text"][:40], got[:12], item["ids"][:12]))
    finally:
        assert s.stop(timeout=60) == 0
    assert not bad, f"{len(bad)} of {len(data['texts'])} texts tokenized differently from llama.cpp: {bad[:3]}"
    for item in data["texts"][:2]:
        assert tokenize(engine_path, gemma_path, item["text"]) == item["ids"]


@pytest.mark.parametrize("name", ["short", "code", "long"])
def test_logits_match_reference(name, prompts, ref_logits, engine_path, gemma_path, tmp_path):
    ids = prompts[name]
    ref = ref_logits(ids)
    got = run_engine(engine_path, gemma_path, ids, tmp_path / "logits.f32")
    err = rel_err(got, ref)
    print(f"gemma3 {name}: {len(ids)} tokens, max rel err {err:.3e}, top-1 ref {np.argmax(ref)} engine {np.argmax(got)}")
    assert err <= REL_TOL


def test_decode_steps_past_the_window_match_reference(prompts, ref_logits, engine_path, gemma_path, tmp_path):
    """The last 60 tokens one per step through the paged cache, each step's
    local layers sliding their window on by one key."""
    ids = prompts["long"]
    ref = ref_logits(ids)
    got = run_engine(engine_path, gemma_path, ids, tmp_path / "logits.f32", decode_from=len(ids) - 60)
    assert rel_err(got, ref) <= REL_TOL


def test_window_matters_on_the_long_prompt(prompts, gemma_ref, engine_path, gemma_path, tmp_path):
    """The test above can fail: the reference with every key visible on the
    local layers is far from the engine."""
    ids = prompts["long"]
    got = run_engine(engine_path, gemma_path, ids, tmp_path / "logits.f32")
    hp = gemma_ref.hp
    saved = hp.window
    hp.window = 0
    try:
        far = rel_err(got, llama_ref.forward(gemma_ref, ids))
    finally:
        hp.window = saved
    print(f"without the window: max rel err {far:.3e}")
    assert far > 100 * REL_TOL


@pytest.mark.parametrize("kv_dtype", ["f16", "bf16"])
def test_logits_with_half_kv(kv_dtype, prompts, ref_logits, engine_path, gemma_path, tmp_path):
    ids = prompts["long"]
    ref = ref_logits(ids)
    got = run_engine(engine_path, gemma_path, ids, tmp_path / "logits.f32", kv_dtype=kv_dtype)
    err = rel_err(got, ref)
    print(f"gemma3 long {kv_dtype} KV: max rel err {err:.3e} (bound {HALF_KV_TOL[kv_dtype]:.1e})")
    assert err <= HALF_KV_TOL[kv_dtype]
