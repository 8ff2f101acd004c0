#!/usr/bin/env python3
"""Load test for `agentkv serve`: C concurrent clients x N requests each,
streamed chat and completion requests built from a few shared system prompts
with varied user suffixes, under a KV budget small enough to force
preemption. Prints a Markdown table (one row per run) and the checks; exits
non-zero when a check fails.

Checks:
  - no lost or malformed response: every 200 stream ends with a finish_reason
    and [DONE], every non-streamed body is a valid completion object;
  - no 429 in the main phase (--max-queue is sized so that C clients never
    fill the queue); with --flood, a second server with a tiny queue must
    answer 429 (OpenAI error JSON) to some of a burst and 200 to the rest;
  - KV blocks (sampled from /metrics): used + cached + free is constant and
    used <= that total;
  - server RSS (VmRSS, when the PID is known) at 100% of the requests is
    within 20% of the RSS at 10%.

Examples:
  scripts/load_test.py                                  # 64 x 200 on build/agentkv
  scripts/load_test.py --clients 16 --requests 8 --flood
  scripts/load_test.py --compare-cache --repeats 3     # cache on / off, interleaved
  scripts/load_test.py --url http://127.0.0.1:8000 --pid 1234 --model-name m
"""
import argparse
import asyncio
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

try:
    import httpx
except ImportError:  # the openai package in .venv ships it under this name
    import httpx2 as httpx

ROOT = Path(__file__).resolve().parents[1]
LISTEN_RE = re.compile(r"agentkv: listening on http://([^\s:/]+):(\d+)")
METRIC_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
RSS_GROWTH_LIMIT = 1.20


# -- the server ---------------------------------------------------------------------------


class ManagedServer:
    """`agentkv serve --port 0`, its address read from stderr; SIGTERM to stop."""

    def __init__(self, args, extra_flags):
        self.cmd = [str(args.bin), "serve", "--model", str(args.model), "--host", "127.0.0.1", "--port", "0",
                    "--threads", str(args.threads), "--block-size", str(args.block_size),
                    "--kv-cache-mb", str(args.kv_cache_mb), "--max-running", str(args.max_running),
                    "--max-queue", str(args.max_queue), "--served-model-name", args.model_name,
                    *args.server_arg, *extra_flags]
        if args.max_batch_tokens:
            self.cmd += ["--max-batch-tokens", str(args.max_batch_tokens)]
        self.tail = []
        self.url = None
        ready = threading.Event()
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, cwd=ROOT)

        def read():
            for raw in self.proc.stderr:
                line = raw.decode("utf-8", "replace").rstrip()
                self.tail = (self.tail + [line])[-50:]
                m = LISTEN_RE.search(line)
                if m and self.url is None:
                    self.url = f"http://{m.group(1)}:{m.group(2)}"
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(120) or self.url is None:
            self.proc.kill()
            raise RuntimeError("server did not start:\n" + "\n".join(self.tail))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.proc.kill()
        raise RuntimeError("server not healthy:\n" + "\n".join(self.tail))

    @property
    def pid(self):
        return self.proc.pid

    def stop(self, timeout=60):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            m = METRIC_RE.match(line)
            if not m:
                raise ValueError(f"bad /metrics line {line!r}")
            out[(m.group(1), frozenset(LABEL_RE.findall(m.group(3) or "")))] = float(m.group(4))
    return out


def metric(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def preemptions(samples):
    """The sum of every counter whose name mentions preemption (None: no such metric)."""
    vals = [v for (name, _), v in samples.items() if "preempt" in name and not name.endswith(("_bucket", "_sum"))]
    return sum(vals) if vals else None


# -- the workload -----------------------------------------------------------------------------

TOPICS = ["rivers", "compilers", "bread", "volcanoes", "chess", "bees", "trains", "glaciers"]
QUESTIONS = ["What is the main idea?", "Give one example.", "Name a related topic.", "Summarise briefly.",
             "What comes next?", "Why does it matter?", "List two facts.", "Explain it to a child."]


def system_prompts(n, words, rng):
    vocab = ("the a of to in is that for on with as by at from this which it be are was an or can "
             "system agent memory cache block token request model answer context share").split()
    out = []
    for k in range(n):
        topic = TOPICS[k % len(TOPICS)]
        body = " ".join(rng.choice(vocab) for _ in range(words))
        out.append(f"You are agent {k}, an expert on {topic}. Background notes: {body}.")
    return out


def make_request(args, systems, rng, client_id, i):
    system = rng.choice(systems)
    user = f"[client {client_id} request {i}] {rng.choice(QUESTIONS)} Topic {rng.randrange(1000)}."
    stream = rng.random() < args.stream_fraction
    body = {"model": args.model_name, "max_tokens": args.max_tokens, "temperature": 0, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if rng.random() < args.chat_fraction:
        body["messages"] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return "/v1/chat/completions", body
    body["prompt"] = system + "\n\n" + user + "\nAnswer:"
    return "/v1/completions", body


# -- one request ------------------------------------------------------------------------------


class Malformed(Exception):
    pass


def check_usage(u, max_tokens, finish):
    if not isinstance(u, dict) or not all(isinstance(u.get(k), int) for k in ("prompt_tokens", "completion_tokens")):
        raise Malformed(f"bad usage {u!r}")
    if u["prompt_tokens"] <= 0 or not 0 <= u["completion_tokens"] <= max_tokens:
        raise Malformed(f"usage out of range {u!r}")
    if finish == "length" and u["completion_tokens"] != max_tokens:
        raise Malformed(f"finish length after {u['completion_tokens']} of {max_tokens} tokens")
    return u


def cached_of(u):
    return ((u.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0


def check_body(obj, chat, max_tokens):
    want = "chat.completion" if chat else "text_completion"
    if obj.get("object") != want or not isinstance(obj.get("choices"), list) or len(obj["choices"]) != 1:
        raise Malformed(f"bad completion object {str(obj)[:200]}")
    ch = obj["choices"][0]
    text = ch.get("message", {}).get("content") if chat else ch.get("text")
    if not isinstance(text, str) or ch.get("finish_reason") not in ("stop", "length"):
        raise Malformed(f"bad choice {str(ch)[:200]}")
    return check_usage(obj.get("usage"), max_tokens, ch["finish_reason"])


async def read_stream(resp, chat, max_tokens, t0, rec):
    want = "chat.completion.chunk" if chat else "text_completion"
    finishes, usage, done, rid = [], None, False, None
    async for line in resp.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if done:
            raise Malformed("data after [DONE]")
        if data == "[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        if "error" in chunk:
            raise Malformed(f"error in stream: {chunk['error']}")
        rid = rid or chunk.get("id")
        if chunk.get("object") != want or not rid or chunk.get("id") != rid:
            raise Malformed(f"bad chunk {data[:200]}")
        if chunk.get("usage"):
            usage = chunk["usage"]
        for ch in chunk.get("choices") or []:
            if finishes:
                raise Malformed("a choice after finish_reason")
            text = (ch.get("delta") or {}).get("content") if chat else ch.get("text")
            if text and rec["ttft"] is None:
                rec["ttft"] = time.monotonic() - t0
            if ch.get("finish_reason"):
                finishes.append(ch["finish_reason"])
    if not done:
        raise Malformed("stream ended without [DONE]")
    if len(finishes) != 1 or finishes[0] not in ("stop", "length"):
        raise Malformed(f"finish reasons {finishes}")
    return check_usage(usage, max_tokens, finishes[0])


async def one_request(client, url, headers, endpoint, body):
    chat = endpoint.endswith("chat/completions")
    rec = {"status": None, "ok": False, "error": None, "ttft": None, "total": None, "prompt_tokens": 0,
           "cached_tokens": 0, "completion_tokens": 0}
    t0 = time.monotonic()
    try:
        async with client.stream("POST", url + endpoint, json=body, headers=headers) as resp:
            rec["status"] = resp.status_code
            if resp.status_code != 200:
                raw = await resp.aread()
                err = json.loads(raw).get("error")  # an error must still be OpenAI JSON
                if not isinstance(err, dict) or "message" not in err:
                    raise Malformed(f"status {resp.status_code} without OpenAI error body")
                rec["error"] = f"{resp.status_code}: {err['message'][:100]}"
            elif body["stream"]:
                usage = await read_stream(resp, chat, body["max_tokens"], t0, rec)
                rec.update(ok=True, prompt_tokens=usage["prompt_tokens"], cached_tokens=cached_of(usage),
                           completion_tokens=usage["completion_tokens"])
            else:
                usage = check_body(json.loads(await resp.aread()), chat, body["max_tokens"])
                rec.update(ok=True, prompt_tokens=usage["prompt_tokens"], cached_tokens=cached_of(usage),
                           completion_tokens=usage["completion_tokens"])
    except (Malformed, ValueError) as e:
        rec["error"] = f"malformed: {e}"
    except httpx.HTTPError as e:
        rec["error"] = f"lost: {type(e).__name__}: {e}"
    rec["total"] = time.monotonic() - t0
    if rec["ok"] and rec["ttft"] is None:
        rec["ttft"] = rec["total"]  # non-streamed, or nothing but the finish chunk
    return rec


# -- a run ------------------------------------------------------------------------------------


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def run_phase(args, label, url, pid):
    rng = random.Random(args.seed)
    systems = system_prompts(args.system_prompts, args.system_words, rng)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    total = args.clients * args.requests
    records, failures = [], []
    kv = {"samples": 0, "max_used": 0, "total": None, "full_samples": 0}
    rss = {"at10": None, "at100": None, "max": None}
    limits = httpx.Limits(max_connections=args.clients + 8, max_keepalive_connections=args.clients + 8)
    async with httpx.AsyncClient(timeout=httpx.Timeout(args.timeout), limits=limits) as client:
        m0 = parse_metrics((await client.get(url + "/metrics")).text)

        def kv_check(samples):
            used, cached, free = (metric(samples, "agentkv_kv_blocks", state=s) for s in ("used", "cached", "free"))
            tot = used + cached + free
            kv["total"] = kv["total"] if kv["total"] is not None else tot
            kv["samples"] += 1
            kv["max_used"] = max(kv["max_used"], used)
            kv["full_samples"] += free == 0
            if min(used, cached, free) < 0 or tot != kv["total"] or used > tot or tot <= 0:
                failures.append(f"KV gauges off: used {used} cached {cached} free {free}, total was {kv['total']}")

        kv_check(m0)
        stop = asyncio.Event()

        async def monitor():
            t_last = 0.0
            while not stop.is_set():
                try:
                    kv_check(parse_metrics((await client.get(url + "/metrics")).text))
                except (httpx.HTTPError, ValueError) as e:
                    failures.append(f"/metrics: {e}")
                if pid:
                    r = rss_kib(pid)
                    if r:
                        rss["max"] = max(rss["max"] or 0, r)
                        if rss["at10"] is None and len(records) >= max(1, total // 10):
                            rss["at10"] = r
                now = time.monotonic()
                if now - t_last >= args.progress_s:
                    t_last = now
                    bad = sum(not r["ok"] for r in records)
                    el = now - t_start
                    print(f"{label}: {len(records)}/{total} done, {bad} failed, {len(records) / el:.1f} req/s, "
                          f"{el:.0f} s", file=sys.stderr, end="\r" if sys.stderr.isatty() else "\n", flush=True)
                try:
                    await asyncio.wait_for(stop.wait(), args.sample_s)
                except asyncio.TimeoutError:
                    pass

        async def worker(cid):
            crng = random.Random(f"{args.seed}-{cid}")
            for i in range(args.requests):
                endpoint, body = make_request(args, systems, crng, cid, i)
                records.append(await one_request(client, url, headers, endpoint, body))

        t_start = time.monotonic()
        mon = asyncio.create_task(monitor())
        await asyncio.gather(*(worker(c) for c in range(args.clients)))
        elapsed = time.monotonic() - t_start
        stop.set()
        await mon
        if sys.stderr.isatty():
            print(file=sys.stderr)
        m1 = parse_metrics((await client.get(url + "/metrics")).text)
        kv_check(m1)
    if pid:
        rss["at100"] = rss_kib(pid)

    ok = [r for r in records if r["ok"]]
    statuses = {}
    for r in records:
        statuses[str(r["status"])] = statuses.get(str(r["status"]), 0) + 1
    n429 = sum(r["status"] == 429 for r in records)
    errors = [r["error"] for r in records if not r["ok"]]
    if len(records) != total:
        failures.append(f"{total - len(records)} requests never recorded")
    if n429:
        failures.append(f"{n429} requests answered 429 although the queue ({args.max_queue}) cannot fill")
    other = [r["error"] for r in records if not r["ok"] and r["status"] != 429]
    if other:
        failures.append(f"{len(other)} lost, failed or malformed responses, e.g. {other[:3]}")
    if rss["at10"] and rss["at100"] and rss["at100"] > RSS_GROWTH_LIMIT * rss["at10"]:
        failures.append(f"RSS grew from {rss['at10']} KiB at 10% to {rss['at100']} KiB at 100%")
    p0, p1 = preemptions(m0), preemptions(m1)
    prompt_tokens = sum(r["prompt_tokens"] for r in ok)
    return {
        "label": label,
        "requests": len(records),
        "ok": len(ok),
        "status_429": n429,
        "errors": len(errors),
        "statuses": statuses,
        "elapsed_s": elapsed,
        "ttft_p50_ms": 1e3 * pct([r["ttft"] for r in ok], 50),
        "ttft_p95_ms": 1e3 * pct([r["ttft"] for r in ok], 95),
        "ttft_p99_ms": 1e3 * pct([r["ttft"] for r in ok], 99),
        "latency_p50_ms": 1e3 * pct([r["total"] for r in ok], 50),
        "req_per_s": len(ok) / elapsed,
        "output_tok_per_s": sum(r["completion_tokens"] for r in ok) / elapsed,
        "prompt_tokens": prompt_tokens,
        "cached_tokens": sum(r["cached_tokens"] for r in ok),
        "prefix_hit_rate": sum(r["cached_tokens"] for r in ok) / max(1, prompt_tokens),
        "metrics_prefix_hit_tokens": metric(m1, "agentkv_prefix_hit_tokens_total")
        - metric(m0, "agentkv_prefix_hit_tokens_total"),
        "preemptions": None if p1 is None else p1 - (p0 or 0),
        # serve --fidelity-audit: how the sampled requests ended (by the end of the phase)
        "audits": {r: metric(m1, "agentkv_fidelity_audit_requests_total", result=r) -
                   metric(m0, "agentkv_fidelity_audit_requests_total", result=r)
                   for r in ("audited", "skipped", "dropped", "failed")},
        "kv_blocks_total": kv["total"],
        "kv_max_used": kv["max_used"],
        "kv_full_samples": kv["full_samples"],
        "kv_samples": kv["samples"],
        "rss_at10_kib": rss["at10"],
        "rss_at100_kib": rss["at100"],
        "rss_max_kib": rss["max"],
        "failures": failures,
    }


async def flood_phase(args, url, n):
    """n simultaneous short requests at a server with a tiny queue: some must
    be refused with 429 (OpenAI JSON), the rest must succeed."""
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    body = {"model": args.model_name, "prompt": "Count: 1, 2, 3,", "max_tokens": 8, "temperature": 0,
            "stream": False}
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(args.timeout), limits=limits) as client:
        recs = await asyncio.gather(*(one_request(client, url, headers, "/v1/completions", dict(body))
                                      for _ in range(n)))
        healthy = (await client.get(url + "/health")).status_code == 200
    n200 = sum(r["ok"] for r in recs)
    n429 = sum(r["status"] == 429 and r["error"] and not r["error"].startswith("malformed") for r in recs)
    failures = []
    if n429 == 0:
        failures.append(f"flood: {n} simultaneous requests at --max-queue {args.flood_queue} got no 429")
    if n200 + n429 != n:
        failures.append(f"flood: {n - n200 - n429} answers neither a good 200 nor a 429 with error JSON: "
                        f"{[r['error'] for r in recs if not r['ok'] and r['status'] != 429][:3]}")
    if n200 == 0:
        failures.append("flood: no request succeeded")
    if not healthy:
        failures.append("flood: /health not 200 afterwards")
    return {"sent": n, "ok": n200, "status_429": n429, "failures": failures}


# -- report -----------------------------------------------------------------------------------


def fmt(x, spec=".0f"):
    return "n/a" if x is None or x != x else format(x, spec)


def table(rows):
    head = ["run", "requests", "ok", "429", "errors", "P50 TTFT ms", "P95 TTFT ms", "P99 TTFT ms", "P50 latency ms", "req/s",
            "out tok/s", "prefix hit", "preemptions", "KV used max/total", "RSS 10% MiB", "RSS 100% MiB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        mib = lambda k: fmt(r[k] / 1024 if r[k] else None, ".1f")  # noqa: E731
        lines.append("| " + " | ".join([
            r["label"], str(r["requests"]), str(r["ok"]), str(r["status_429"]), str(r["errors"]),
            fmt(r["ttft_p50_ms"]), fmt(r["ttft_p95_ms"]), fmt(r["ttft_p99_ms"]), fmt(r["latency_p50_ms"]), fmt(r["req_per_s"], ".2f"),
            fmt(r["output_tok_per_s"], ".1f"), f"{100 * r['prefix_hit_rate']:.1f}%", fmt(r["preemptions"]),
            f"{r['kv_max_used']:.0f}/{fmt(r['kv_blocks_total'])}", mib("rss_at10_kib"), mib("rss_at100_kib")]) + " |")
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="attach to a running server instead of starting one")
    p.add_argument("--pid", type=int, help="with --url: the server's PID, for the RSS check")
    p.add_argument("--api-key", help="bearer key to send (with --url)")
    p.add_argument("--bin", default=os.environ.get("AGENTKV_BIN", ROOT / "build" / "agentkv"), type=Path)
    p.add_argument("--model", default=os.environ.get("AGENTKV_MODEL", ROOT / "models" /
                                                     "SmolLM2-135M-Instruct.Q4_1.gguf"), type=Path)
    p.add_argument("--model-name", default="load-test", help="--served-model-name (or the name to send with --url)")
    p.add_argument("-c", "--clients", type=int, default=64, help="concurrent clients (default 64)")
    p.add_argument("-n", "--requests", type=int, default=200, help="requests per client (default 200)")
    p.add_argument("--max-tokens", type=int, default=16, help="max_tokens of every request (default 16)")
    p.add_argument("--system-prompts", type=int, default=4, help="shared system prompts (default 4)")
    p.add_argument("--system-words", type=int, default=120, help="words per system prompt (default 120)")
    p.add_argument("--stream-fraction", type=float, default=0.8, help="share of streamed requests (default 0.8)")
    p.add_argument("--chat-fraction", type=float, default=0.5, help="share of chat requests (default 0.5)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="server compute threads")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--kv-cache-mb", type=int, default=96, help="KV budget, small enough to force preemption (96 MiB of f16 KV holds ~24 of 64 sequences)")
    p.add_argument("--max-running", type=int, default=64)
    p.add_argument("--max-queue", type=int, default=1024, help="must exceed --clients: any 429 then fails")
    p.add_argument("--max-batch-tokens", type=int, default=0, help="0: the server's default")
    p.add_argument("--server-arg", action="append", default=[], help="extra flag for `agentkv serve` (repeatable)")
    p.add_argument("--compare-cache", action="store_true", help="run with prefix caching on, then off")
    p.add_argument("--repeats", type=int, default=1, help="with --compare-cache: on/off pairs (interleaved)")
    p.add_argument("--flood", action="store_true", help="also burst past a tiny queue and expect 429s")
    p.add_argument("--flood-requests", type=int, default=48)
    p.add_argument("--flood-queue", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300, help="per-request timeout in seconds")
    p.add_argument("--sample-s", type=float, default=0.25, help="/metrics and RSS sampling period")
    p.add_argument("--progress-s", type=float, default=2.0, help="progress line period on stderr")
    p.add_argument("--json-out", type=Path, help="write the results as JSON here")
    a = p.parse_args(argv)
    if a.url and (a.compare_cache or a.flood):
        p.error("--compare-cache and --flood start their own servers; drop --url")
    if a.max_queue <= a.clients and not a.url:
        p.error("--max-queue must exceed --clients (a 429 in the main phase counts as a failure)")
    if a.clients < 1 or a.requests < 1 or a.max_tokens < 1:
        p.error("--clients, --requests and --max-tokens must be positive")
    return a


def main(argv=None):
    args = parse_args(argv)
    rows, failures, flood = [], [], None
    if args.url:
        rows.append(asyncio.run(run_phase(args, "attached", args.url.rstrip("/"), args.pid)))
    else:
        modes = [("cache on", [])]
        if args.compare_cache:
            modes.append(("cache off", ["--no-prefix-caching"]))
        for rep in range(args.repeats if args.compare_cache else 1):
            for label, flags in modes:
                srv = ManagedServer(args, flags)
                try:
                    rows.append(asyncio.run(run_phase(args, label, srv.url, srv.pid)))
                finally:
                    rc = srv.stop()
                if rc != 0:
                    failures.append(f"{label}: server exit code {rc} on SIGTERM\n" + "\n".join(srv.tail[-10:]))
        if args.flood:
            fargs = argparse.Namespace(**{**vars(args), "max_queue": args.flood_queue, "max_running": 2})
            srv = ManagedServer(fargs, [])
            try:
                flood = asyncio.run(flood_phase(fargs, srv.url, args.flood_requests))
            finally:
                rc = srv.stop()
            failures += flood["failures"]
            if rc != 0:
                failures.append(f"flood: server exit code {rc} on SIGTERM")
    for r in rows:
        failures += [f"{r['label']}: {f}" for f in r["failures"]]
    print(f"{args.clients} clients x {args.requests} requests, max_tokens {args.max_tokens}, "
          f"{args.system_prompts} system prompts of {args.system_words} words, --kv-cache-mb {args.kv_cache_mb}, "
          f"--threads {args.threads}\n")
    print(table(rows))
    for r in rows:
        if any(r["audits"].values()):
            print(f"{r['label']}: fidelity audits " + ", ".join(f"{k} {v:.0f}" for k, v in r["audits"].items()))
    if flood:
        print(f"\nflood: {flood['sent']} simultaneous requests at --max-queue {args.flood_queue}: "
              f"{flood['ok']} ok, {flood['status_429']} x 429")
    print("\nchecks: " + ("all passed" if not failures else "FAILED"))
    for f in failures:
        print(f"- {f}")
    if args.json_out:
        args.json_out.write_text(json.dumps({"runs": rows, "flood": flood, "failures": failures}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
