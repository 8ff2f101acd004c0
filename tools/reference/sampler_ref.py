#!/usr/bin/env python3
"""Reference for src/runtime/sampler.cpp: the exact filtered token distribution.

Regenerate the fixture the C++ test reads:
    python3 tools/reference/sampler_ref.py > tests/unit/runtime/data/sampler_ref.txt

Written independently of the C++ code, in float64 with numpy: sort the whole
vocabulary, cut it with each filter in the llama.cpp default order
(top-k, top-p, min-p, temperature), then softmax what is left.

Before the filters, the logits are adjusted as vLLM does (its v1 sampler runs
the logit-bias processor, then apply_penalties), in float32 as the logits are:
  1. logit_bias          add bias[id]
  2. repetition_penalty  (HF / vLLM) for every token seen in prompt + output:
                         divide a positive logit by r, multiply a negative one by r
  3. frequency_penalty   (OpenAI) subtract f * (times the token was generated)
  4. presence_penalty    (OpenAI) subtract p if the token was generated at all

Fixture format (one case per block, '#' lines are comments):
    case <name> vocab <V> temperature <t> top_k <k> top_p <p> min_p <m> rep <r> freq <f> pres <p>
    logits <V float32 values, as exact decimals>
    bias <n> <id> <b> ...  (logit_bias)
    prompt <n> <id> ...    (prompt token ids, for the repetition penalty)
    output <n> <id> ...    (generated token ids, in order, for all penalties)
    probs <n> <id> <p> ... (the n tokens with non-zero probability)
    alt <n> <id> <p> ...   (a wrong variant the C++ empirical test must reject:
                            the same filters with temperature applied FIRST, or
                            for the penalty cases a wrong penalty semantics)
"""
import itertools
import sys

import numpy as np


def softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x)
    e = np.exp(x - m)
    return e / e.sum()


def sorted_ids(logits):
    """Token ids by descending logit; equal logits by ascending id."""
    v = len(logits)
    return np.lexsort((np.arange(v), -logits.astype(np.float64)))


# Each stage maps (candidate ids in sorted order, current logits) to new ones.
def stage_top_k(cand, l, p):
    k = p["top_k"]
    if k > 0:
        cand = cand[:k]
    return cand, l


def stage_top_p(cand, l, p):
    if p["top_p"] < 1.0:
        c = np.cumsum(softmax(l[cand]))
        # Smallest prefix whose mass reaches top_p (llama.cpp keeps the token
        # that crosses the threshold).
        n = int(np.argmax(c >= p["top_p"])) + 1 if np.any(c >= p["top_p"]) else len(cand)
        cand = cand[:n]
    return cand, l


def stage_min_p(cand, l, p):
    if p["min_p"] > 0.0:
        q = softmax(l[cand])
        cand = cand[q >= p["min_p"] * q.max()]
    return cand, l


def stage_temperature(cand, l, p):
    t = p["temperature"]
    if t > 0:
        l = l / t
    return cand, l


CANONICAL = [stage_top_k, stage_top_p, stage_min_p, stage_temperature]


def adjust(logits, params, variant=None):
    """logit_bias, then the penalties, in float32. `variant` names a wrong
    semantics (see ADJUST_VARIANTS) a correct test must tell apart."""
    l = np.array(logits, dtype=np.float32)
    prompt = [int(t) for t in params.get("prompt", [])]
    output = [int(t) for t in params.get("output", [])]
    bias = params.get("bias", {})

    def add_bias():
        for i, b in bias.items():
            l[i] = np.float32(l[i] + np.float32(b))

    if variant != "bias_after_penalties":
        add_bias()
    r = np.float32(params.get("rep", 1.0))
    if r != 1.0:
        seen = set(output) if variant == "rep_output_only" else set(prompt) | set(output)
        for i in sorted(seen):
            if variant == "rep_sign_blind" or l[i] > 0:
                l[i] = np.float32(l[i] / r)
            else:
                l[i] = np.float32(l[i] * r)
    counts = {}
    for t in (prompt + output if variant == "freq_over_prompt" else output):
        counts[t] = counts.get(t, 0) + 1
    f = np.float32(params.get("freq", 0.0))
    p = np.float32(params.get("pres", 0.0))
    for i, c in counts.items():
        if f != 0.0:
            l[i] = np.float32(l[i] - f * np.float32(c))
        if p != 0.0:
            l[i] = np.float32(l[i] - p)
    if variant == "bias_after_penalties":
        add_bias()
    return l


ADJUST_VARIANTS = ["rep_sign_blind", "rep_output_only", "freq_over_prompt", "bias_after_penalties"]


def distribution(logits, params, stages=CANONICAL, variant=None):
    logits = adjust(logits, params, variant)
    v = len(logits)
    out = np.zeros(v, dtype=np.float64)
    l = logits.astype(np.float64)
    if params["temperature"] == 0.0:
        out[sorted_ids(logits)[0]] = 1.0  # greedy: argmax, lowest id on ties
        return out
    cand = sorted_ids(logits)
    for s in stages:
        cand, l = s(cand, l, params)
    out[cand] = softmax(l[cand])
    return out


def check_margins(logits, params):
    """Refuse cases whose cut-offs sit within float32 rounding of a threshold:
    the C++ code works in float and must reach the same cut."""
    logits = adjust(logits, params)
    l = logits.astype(np.float64)
    cand = sorted_ids(logits)
    if params["top_k"] > 0:
        cand = cand[: params["top_k"]]
    if params["top_p"] < 1.0:
        c = np.cumsum(softmax(l[cand]))
        assert np.min(np.abs(c - params["top_p"])) > 2e-6, "top_p too close to a cumulative sum"
        n = int(np.argmax(c >= params["top_p"])) + 1 if np.any(c >= params["top_p"]) else len(cand)
        cand = cand[:n]
    if params["min_p"] > 0.0:
        q = softmax(l[cand])
        r = q / q.max()
        assert np.min(np.abs(r - params["min_p"])) > 2e-6, "min_p too close to a probability ratio"


def make_logits(seed, v, sigma, ties=False, n_masked=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, sigma, v)
    if ties:
        x = np.round(x * 2.0) / 2.0  # many equal logits, so top-k cuts inside a tie
    x = x.astype(np.float32)
    if n_masked:
        x[rng.choice(v, n_masked, replace=False)] = -np.inf
    return x


def P(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, rep=1.0, freq=0.0, pres=0.0, bias=None, prompt=(),
      output=()):
    # float32 values, as the C++ SamplingParams holds them
    f32 = lambda x: float(np.float32(x))
    return dict(temperature=f32(temperature), top_k=top_k, top_p=f32(top_p), min_p=f32(min_p), rep=f32(rep),
                freq=f32(freq), pres=f32(pres), bias={int(k): f32(b) for k, b in (bias or {}).items()},
                prompt=list(prompt), output=list(output))


def history(seed, v, n):
    """n token ids drawn with repeats from the first v/2 ids, so some tokens
    come up several times and half the vocabulary is never seen."""
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(0, v // 2, n)]


# name, logits, params, must_differ_from (orders a correct test must tell apart)
CASES = [
    ("greedy", make_logits(1, 64, 2.0), P(temperature=0.0), []),
    ("plain_t1", make_logits(2, 64, 2.0), P(), []),
    ("plain_t07", make_logits(3, 64, 2.0), P(temperature=0.7), []),
    ("masked_t1", make_logits(4, 64, 2.0, n_masked=10), P(), []),
    ("top_k5", make_logits(5, 64, 2.0), P(top_k=5), []),
    ("top_k1", make_logits(6, 64, 2.0), P(top_k=1, temperature=1.3), []),
    ("top_k_over_vocab", make_logits(7, 64, 2.0), P(top_k=100), []),
    ("top_k_ties", make_logits(8, 64, 1.5, ties=True), P(top_k=7), []),
    ("top_p05", make_logits(9, 64, 2.0), P(top_p=0.5), []),
    ("top_p09_big", make_logits(10, 4096, 1.0), P(top_p=0.9), []),
    ("min_p01", make_logits(11, 64, 2.0), P(min_p=0.1), []),
    ("min_p005_big", make_logits(12, 4096, 2.0), P(min_p=0.05), []),
    ("top_k10_top_p06", make_logits(13, 64, 1.0), P(top_k=10, top_p=0.6), ["top_p_first"]),
    ("top_p07_t05", make_logits(14, 64, 2.0), P(top_p=0.7, temperature=0.5), ["temp_first"]),
    ("min_p02_t2", make_logits(15, 64, 2.0), P(min_p=0.2, temperature=2.0), ["temp_first"]),
    ("all_four", make_logits(16, 256, 1.5),
     P(top_k=40, top_p=0.8, min_p=0.15, temperature=1.5), ["temp_first", "min_p_first", "top_p_first"]),
    ("top_k20_min_p03_big", make_logits(17, 4096, 2.0), P(top_k=20, min_p=0.3, temperature=0.8), []),
    # Penalties and logit_bias: the first entry of must_differ_from is the
    # variant written as the case's "alt" line.
    ("rep2", make_logits(18, 64, 0.8), P(rep=2.0, prompt=history(1, 64, 16), output=history(2, 64, 6)),
     ["rep_output_only", "rep_sign_blind"]),
    ("rep07_t08", make_logits(19, 64, 0.8),
     P(rep=0.7, temperature=0.8, prompt=history(3, 64, 10), output=history(4, 64, 5)), ["rep_sign_blind"]),
    ("freq08", make_logits(20, 64, 1.5), P(freq=0.8, prompt=history(5, 64, 20), output=history(6, 64, 15)),
     ["freq_over_prompt"]),
    ("pres15_neg_freq", make_logits(21, 64, 1.5),
     P(pres=1.5, freq=-0.3, prompt=history(7, 64, 8), output=history(8, 64, 12)), ["freq_over_prompt"]),
    ("bias", make_logits(22, 64, 2.0), P(bias={3: 5.0, 40: -30.0, 7: 2.5, 63: 5.0}), []),
    ("bias_rep2", make_logits(23, 64, 2.0),
     P(rep=2.0, bias={0: -3.0, 1: 4.0, 2: -2.0, 5: 3.0}, prompt=[0, 1, 2, 5, 9], output=[1, 9]),
     ["bias_after_penalties", "rep_sign_blind"]),
    ("all_penalties_filters", make_logits(24, 256, 1.5),
     P(top_k=40, top_p=0.9, min_p=0.05, temperature=0.9, rep=1.2, freq=0.5, pres=0.4, bias={10: 3.0, 20: -1.0},
       prompt=history(9, 256, 40), output=history(10, 256, 30)),
     ["rep_output_only", "freq_over_prompt", "temp_first"]),
    ("rep_big", make_logits(25, 4096, 2.0), P(rep=1.5, min_p=0.03, prompt=history(11, 4096, 300),
                                              output=history(12, 4096, 100)), []),
]

ORDERS = {
    "temp_first": [stage_temperature, stage_top_k, stage_top_p, stage_min_p],
    "min_p_first": [stage_top_k, stage_min_p, stage_top_p, stage_temperature],
    "top_p_first": [stage_top_p, stage_top_k, stage_min_p, stage_temperature],
}


def fmt_ids(tag, ids):
    return tag + " " + str(len(ids)) + "".join(f" {i}" for i in ids)


def fmt_sparse(tag, d):
    nz = np.nonzero(d)[0]
    return tag + " " + str(len(nz)) + "".join(f" {i} {float(d[i]):.12g}" for i in nz)


def main():
    out = sys.stdout
    out.write("# generated by: python3 tools/reference/sampler_ref.py > tests/unit/runtime/data/sampler_ref.txt\n")
    for name, logits, params, differ in CASES:
        check_margins(logits, params)
        d = distribution(logits, params)
        assert abs(d.sum() - 1.0) < 1e-12
        def wrong(what):
            if what in ORDERS:
                return distribution(logits, params, ORDERS[what])
            return distribution(logits, params, variant=what)

        for what in differ:
            diff = np.max(np.abs(wrong(what) - d))
            assert diff > 1e-3, f"{name}: {what} is indistinguishable ({diff})"
            print(f"# {name} vs {what}: max |dp| {diff:.3g}", file=sys.stderr)
        alt = wrong(differ[0] if differ and differ[0] in ADJUST_VARIANTS else "temp_first")
        out.write(f"case {name} vocab {len(logits)} temperature {params['temperature']!r} "
                  f"top_k {params['top_k']} top_p {params['top_p']!r} min_p {params['min_p']!r} "
                  f"rep {params['rep']!r} freq {params['freq']!r} pres {params['pres']!r}\n")
        # 9 significant digits name a float32 exactly (the C++ side parses with strtof)
        out.write("logits" + "".join(f" {float(x):.9g}" for x in logits) + "\n")
        if params["bias"]:
            out.write("bias " + str(len(params["bias"])) +
                      "".join(f" {i} {b!r}" for i, b in sorted(params["bias"].items())) + "\n")
        if params["prompt"]:
            out.write(fmt_ids("prompt", params["prompt"]) + "\n")
        if params["output"]:
            out.write(fmt_ids("output", params["output"]) + "\n")
        out.write(fmt_sparse("probs", d) + "\n")
        out.write(fmt_sparse("alt", alt) + "\n")


if __name__ == "__main__":
    main()
