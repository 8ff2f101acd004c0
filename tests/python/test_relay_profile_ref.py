"""profile-relay's per-layer similarity against the numpy reference
(issue 28, item 3: "cross-check the per-layer similarity"). For one
calibration chain the engine writes both prompts, agent 1's summary, the
positions it compared and its s_l (--chains-out). The reference recomputes
the same quantity independently, in float64:

  decode V of the summary  = V of prompt1 + summary at the summary's
                             positions (decode with a cache is that prefix's
                             causal prefill);
  prefill V of the summary = V of prompt2 at the compared positions;
  d = 1 - the mean over KV heads of their cosine; s_l = 1 - mean d.

V carries no rotation, so the two positions differ only through what the
earlier layers attended to. The engine runs q8 activations and an f16 KV
cache; the reference rounds its activations as q8 does (act_q8), not its
cache."""
import json
import subprocess

import numpy as np
import pytest

import llama_ref

# Measured 2026-11-27 on the default model (one chain: 47 compared tokens,
# s_l from 1.0 down to 0.66): |s_l(engine) - s_l(reference)| is at most
# 4.3e-4 in layers 0-10 and 3.5e-3 over all 30 (layers 25-29). Rounding
# alone moves s_l that much: the reference itself with f32 activations
# instead of q8 differs from the q8 one by up to 3.5e-3 (layer 29), and
# differences grow with depth. The bounds are 2x the measured ones; the
# early layers, which fix l_start, are held to the tighter one.
TOLERANCE_EARLY = 1e-3  # layers 0..EARLY_LAYERS-1
EARLY_LAYERS = 11
TOLERANCE = 7e-3


def layer_values(model, tokens):
    """Per layer, V [Hkv, T, hd] of every token of `tokens`, float64."""
    cache = llama_ref.KvCache(model.hp.n_layer)
    llama_ref.forward(model, tokens, cache, act_q8=True)
    return cache.v


def deviation(a, b):
    """1 - mean over heads of cos(a_h, b_h), per token: a, b [Hkv, T, hd]."""
    dot = (a * b).sum(-1)
    na, nb = np.linalg.norm(a, axis=-1), np.linalg.norm(b, axis=-1)
    cos = np.where((na > 0) & (nb > 0), dot / np.maximum(na * nb, 1e-300), 1.0)
    return 1.0 - cos.mean(axis=0)


@pytest.fixture(scope="module")
def chain(engine_path, model_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("relay_ref")
    r = subprocess.run([str(engine_path), "profile-relay", "--model", str(model_path), "--samples", "1",
                        "--doc-tokens", "96", "--gen-tokens", "48", "--bootstrap", "0", "-o",
                        str(out / "profile.json"), "--chains-out", str(out / "chains.jsonl")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = (out / "chains.jsonl").read_text().splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def test_the_similarity_per_layer_is_the_references(chain, ref_model):
    n1 = len(chain["prompt1"])
    at = chain["summary_at"]
    pos = np.array(chain["positions"])
    assert len(pos) >= 16, "too few reused tokens to compare"
    # The compared tokens are summary tokens, in the cache at n1 + (pos - at).
    assert pos.min() >= at and pos.max() < at + len(chain["summary"])
    assert [chain["prompt2"][p] for p in pos] == [chain["summary"][p - at] for p in pos]
    decoded = layer_values(ref_model, chain["prompt1"] + chain["summary"])
    prefilled = layer_values(ref_model, chain["prompt2"])
    ref = np.array([1.0 - deviation(decoded[l][:, n1 + pos - at], prefilled[l][:, pos]).mean()
                    for l in range(ref_model.hp.n_layer)])
    eng = np.array(chain["similarity"])
    assert eng.shape == ref.shape
    diff = np.abs(eng - ref)
    print(f"max |s_engine - s_ref| = {diff.max():.2e} at layer {diff.argmax()}; s_ref from {ref.min():.4f} "
          f"to {ref.max():.4f}")
    assert diff[:EARLY_LAYERS].max() < TOLERANCE_EARLY, list(zip(eng.round(5), ref.round(5)))
    assert diff.max() < TOLERANCE, list(zip(eng.round(5), ref.round(5)))
    # Not a vacuous match: the curve falls well below 1 in the middle layers.
    assert ref.min() < 0.99
