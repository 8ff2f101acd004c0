#!/usr/bin/env python3
"""Reference for src/runtime/sampler.cpp: the exact filtered token distribution.

Regenerate the fixture the C++ test reads:
    python3 tools/reference/sampler_ref.py > tests/unit/runtime/data/sampler_ref.txt

Written independently of the C++ code, in float64 with numpy: sort the whole
vocabulary, cut it with each filter in the llama.cpp default order
(top-k, top-p, min-p, temperature), then softmax what is left.

Fixture format (one case per block, '#' lines are comments):
    case <name> vocab <V> temperature <t> top_k <k> top_p <p> min_p <m>
    logits <V float32 values, as exact decimals>
    probs <n> <id> <p> ... (the n tokens with non-zero probability)
    alt <n> <id> <p> ...   (the same filters with temperature applied FIRST,
                            a wrong order the C++ empirical test must reject)
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


def distribution(logits, params, stages=CANONICAL):
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


def P(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    # float32 values, as the C++ SamplingParams holds them
    return dict(temperature=float(np.float32(temperature)), top_k=top_k,
                top_p=float(np.float32(top_p)), min_p=float(np.float32(min_p)))


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
]

ORDERS = {
    "temp_first": [stage_temperature, stage_top_k, stage_top_p, stage_min_p],
    "min_p_first": [stage_top_k, stage_min_p, stage_top_p, stage_temperature],
    "top_p_first": [stage_top_p, stage_top_k, stage_min_p, stage_temperature],
}


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
        for order in differ:
            alt = distribution(logits, params, ORDERS[order])
            diff = np.max(np.abs(alt - d))
            assert diff > 1e-3, f"{name}: order {order} is indistinguishable ({diff})"
        alt = distribution(logits, params, ORDERS["temp_first"])
        out.write(f"case {name} vocab {len(logits)} temperature {params['temperature']!r} "
                  f"top_k {params['top_k']} top_p {params['top_p']!r} min_p {params['min_p']!r}\n")
        # 9 significant digits name a float32 exactly (the C++ side parses with strtof)
        out.write("logits" + "".join(f" {float(x):.9g}" for x in logits) + "\n")
        out.write(fmt_sparse("probs", d) + "\n")
        out.write(fmt_sparse("alt", alt) + "\n")


if __name__ == "__main__":
    main()
