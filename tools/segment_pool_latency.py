"""Latency of a prompt that contains a frozen segment (POST /v1/segments)
against the same prompt after the segment is deleted (full recompute), on
`agentkv serve` with kv_sharing naive. Prints one table.

    .venv/bin/python tools/segment_pool_latency.py [MODEL] [--facts N]

Each prompt is a fresh short prefix, the segment's tokens and a question, so
the only cache it can use is the segment. The first prompt after the delete
recomputes everything; later ones reuse that prompt's own blocks (ordinary
segment reuse), so the recompute figure is that first prompt alone."""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from server_util import Server  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--facts", type=int, default=60, help="sentences in the segment (60: ~1.2K tokens)")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    s = Server(ROOT / "build" / "agentkv", a.model,
               args=["--block-size", 16, "--kv-cache-mb", 256, "--max-model-len", 4096])
    try:
        def post(path, body):
            st, _, d = s.request("POST", path, body)
            assert st == 200, d
            return json.loads(d)

        def tokens(text):
            return post("/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]

        doc = " ".join(f"Fact {i}: item {i} is stored on shelf {i * 7 % 13} in room {i % 5}." for i in range(a.facts))
        seg = tokens(doc)
        t0 = time.perf_counter()
        info = post("/v1/segments", {"tokens": seg})
        t_create = time.perf_counter() - t0
        q = tokens(" Where is item 7?")

        def run(i):
            prompt = tokens(f"Question set {i}, read:") + seg + q
            t0 = time.perf_counter()
            r = post("/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0,
                                         "kv_sharing": {"scheme": "naive"}})
            details = r["usage"].get("prompt_tokens_details") or {}
            return time.perf_counter() - t0, details.get("reused_tokens", 0), r["usage"]["prompt_tokens"]

        hits = [run(i) for i in range(a.repeats)]
        st, _, d = s.request("DELETE", f"/v1/segments/{info['id']}")
        assert st == 200, d
        miss = run(1000)
        print(f"segment: {info['tokens']} tokens, {info['blocks']} blocks pinned, POST /v1/segments {t_create * 1e3:.0f} ms")
        print("| prompt | prompt tokens | reused tokens | latency (1 token), ms |")
        print("| --- | --- | --- | --- |")
        print(f"| segment frozen (median of {a.repeats}) | {hits[0][2]} | {hits[0][1]} | "
              f"{statistics.median(h[0] for h in hits) * 1e3:.0f} |")
        print(f"| segment deleted (recompute) | {miss[2]} | {miss[1]} | {miss[0] * 1e3:.0f} |")
    finally:
        s.stop()


if __name__ == "__main__":
    main()
