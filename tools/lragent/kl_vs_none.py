#!/usr/bin/env python3
"""Teacher-forced KL of each KV-sharing scheme's next-token distributions
against Non-Shared (`none`), on the gold trajectories of task.py: the
"KL against Non-Shared" half of the LRAgent Table 3 analog.

Per question, the gold trajectory (task.trajectory_ids: context, then per
line the role's label, its gold tokens and the newline) is fed to the
server one position at a time, in the pipeline's role order: for every
position p the role predicts (its gold tokens and the newline), one
completions request with the prompt ids[:p], the role's adapter,
`max_tokens` 1, `logprobs` 20 and the scheme. A role's line is thus written
into the cache by that role, as in the real pipeline (eval_pipeline.py),
and the scheme decides what the next role reuses of it; only the tokens are
forced to the gold ones, so the trajectories of two schemes never diverge
and every position compares like with like.

Per position, with p = none's top-20 distribution and q the scheme's:

  KL   sum over none's top-20 tokens t of p(t) (log p(t) - log q(t)), where
       a t outside the scheme's top 20 takes the scheme's 20th logprob (an
       upper bound on q(t)), so the figure is a lower bound on the true
       KL(none || scheme) restricted to none's top 20 (which hold > 99% of
       none's mass on this task; the script reports the exact share);
  top1 whether the two argmax tokens agree.

Reported per role step (plan, action, plan, action, reflect) and overall,
as means over positions. Standard library only.

  .venv/bin/python tools/lragent/kl_vs_none.py --serve --n 50 \\
      --serve-args "--droidspeak-profile profiles/smollm2-135m-instruct-q4_1.droidspeak.json" \\
      --schemes full,droidspeak,lragent-base,lragent-baselr --out /tmp/kl.json
"""
import argparse
import concurrent.futures as cf
import json
import math
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import eval_pipeline as ep  # noqa: E402
import task  # noqa: E402


def next_token_top(url, ids, model, scheme, salt):
    # ignore_eos: an adapter that predicts the end of turn at a position (the
    # untrained ones do) still returns that position's distribution.
    body = {"prompt": ids, "max_tokens": 1, "temperature": 0, "logprobs": 20, "ignore_eos": True,
            "kv_sharing": scheme, "cache_salt": salt}
    if model != ep.BASE:
        body["model"] = model
    r = ep.post(url, "/v1/completions", body)
    return r["choices"][0]["logprobs"]["top_logprobs"][0]


def run_question(url, ids, spans, models, scheme, salt):
    """[[top-20 dict per predicted position] per role step]."""
    out = []
    for role, start, end in spans:
        out.append([next_token_top(url, ids[:p], models[role], scheme, salt) for p in range(start, end)])
    return out


def run_scheme(url, trajs, models, scheme, salt, concurrency, label):
    t0 = time.time()
    res = [None] * len(trajs)
    with cf.ThreadPoolExecutor(concurrency) as ex:
        futs = {ex.submit(run_question, url, ids, spans, models, scheme, salt): i
                for i, (ids, spans) in enumerate(trajs)}
        for done, f in enumerate(cf.as_completed(futs), 1):
            res[futs[f]] = f.result()
            if done % 25 == 0 or done == len(trajs):
                print(f"[kl] {label}: {done}/{len(trajs)} {time.time() - t0:.0f}s", file=sys.stderr, flush=True)
    return res


def kl_top(p, q):
    """(lower-bound KL over p's top tokens, p's top mass, argmax agreement)."""
    floor = min(q.values())
    kl = 0.0
    mass = 0.0
    for t, lp in p.items():
        pt = math.exp(lp)
        mass += pt
        kl += pt * (lp - q.get(t, floor))
    return max(kl, 0.0), mass, max(p, key=p.get) == max(q, key=q.get)


def compare(ref, got, n_steps):
    per_step = [[0.0, 0.0, 0, 0] for _ in range(n_steps)]  # kl sum, mass sum, top1 agree, positions
    for rq, gq in zip(ref, got):
        for s, (rs, gs) in enumerate(zip(rq, gq)):
            for p, q in zip(rs, gs):
                kl, mass, agree = kl_top(p, q)
                acc = per_step[s]
                acc[0] += kl
                acc[1] += mass
                acc[2] += agree
                acc[3] += 1
    total = [sum(a[i] for a in per_step) for i in range(4)]
    fmt = lambda a: {"kl": a[0] / a[3], "top_mass": a[1] / a[3], "top1_agree": a[2] / a[3], "positions": a[3]}  # noqa: E731
    return {"steps": [fmt(a) for a in per_step], "all": fmt(total)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ep.add_server_args(ap)
    ap.add_argument("--n", type=int, default=50, help="questions")
    ap.add_argument("--seed", type=int, default=0, help="task seed (evaluation: 0)")
    ap.add_argument("--schemes", default="full,droidspeak,lragent-base,lragent-baselr",
                    help="comma list of kv_sharing schemes compared with none")
    ap.add_argument("--concurrency", type=int, default=8, help="questions in flight")
    ap.add_argument("--out", help="write the results as JSON")
    args = ap.parse_args(argv)

    with ep.server_url(args) as url:
        nl = ep.newline_id(url)
        enc = lambda s: ep.tokenize(url, s)  # noqa: E731
        trajs = [task.trajectory_ids(enc, task.make_instance(args.seed, i), nl) for i in range(args.n)]
        models = {r: r for r in task.ROLES}
        steps = list(task.ROLE_SEQUENCE)
        ref = run_scheme(url, trajs, models, "none", "kl-none", args.concurrency, "none")
        out = {"seed": args.seed, "n": args.n, "schemes": {}}
        for s in [x.strip() for x in args.schemes.split(",") if x.strip()]:
            got = run_scheme(url, trajs, models, s, "kl-" + re.sub(r"[^A-Za-z0-9_.-]", "_", s),
                             args.concurrency, s)
            out["schemes"][s] = compare(ref, got, len(steps))
        print()
        print(f"Teacher-forced KL(none || scheme) over none's top 20, {args.n} questions "
              f"(positions per run: {next(iter(out['schemes'].values()))['all']['positions'] if out['schemes'] else 0})")
        print()
        print("| scheme | " + " | ".join(f"KL {r} {i + 1}" for i, r in enumerate(steps)) +
              " | KL all | top-1 agrees (%) | none's top-20 mass |")
        print("|---|" + "---|" * (len(steps) + 3))
        for s, d in out["schemes"].items():
            cells = " | ".join(f"{x['kl']:.3f}" for x in d["steps"])
            a = d["all"]
            print(f"| {s} | {cells} | {a['kl']:.3f} | {100 * a['top1_agree']:.1f} | {a['top_mass']:.4f} |")
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
