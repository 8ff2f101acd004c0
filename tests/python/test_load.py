"""scripts/load_test.py in a CI-sized configuration: 16 clients x 8 requests
under a KV budget that forces preemption; every check of the script must
pass. Also checks that the script's response checker rejects broken streams
(so a passing run means something)."""
import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = ROOT / "scripts" / "load_test.py"


def load_module():
    spec = importlib.util.spec_from_file_location("load_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_load_ci_config(serve_binary, model_path, tmp_path):
    out = tmp_path / "load.json"
    cmd = [sys.executable, str(SCRIPT), "--bin", str(serve_binary), "--model", str(model_path), "--threads", "2",
           "--clients", "16", "--requests", "8", "--max-tokens", "8", "--system-words", "100",
           "--kv-cache-mb", "20", "--max-queue", "64", "--flood", "--flood-requests", "32", "--json-out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    report = r.stdout + "\n" + r.stderr[-3000:]
    assert r.returncode == 0, report
    res = json.loads(out.read_text())
    assert res["failures"] == [], report
    (run,) = res["runs"]
    assert run["requests"] == run["ok"] == 16 * 8, report
    assert run["errors"] == 0 and run["status_429"] == 0
    # Shared system prompts: some prompt tokens come from the cache, although
    # the small pool evicts them often.
    assert run["prefix_hit_rate"] > 0.1, report
    assert run["metrics_prefix_hit_tokens"] > 0, report
    # Whether the engine preempts under this load depends on how the clients'
    # requests interleave (4 runs on the 2-core dev machine, 2026-11-25: 0, 1,
    # 4 and 1 preemptions, the pool's peak 22-26 of 26 blocks), so it is
    # reported above and not asserted here: a timing-dependent assertion would
    # be a lottery. Preemption itself is held deterministically by
    # ServingExact.PreemptionUnderATinyPoolStillMatches and
    # Scheduler.PreemptsTheLatestAndRecomputesItLater; this test holds that a
    # tight pool loses no request and errs on none, and that /metrics
    # exposes the preemption counter the report reads.
    assert run["preemptions"] is not None, report
    assert run["kv_samples"] >= 3
    assert run["rss_at10_kib"] and run["rss_at100_kib"], report
    flood = res["flood"]
    assert flood["status_429"] > 0 and flood["ok"] + flood["status_429"] == flood["sent"], report


class FakeResponse:
    def __init__(self, lines):
        self.lines = lines

    async def aiter_lines(self):
        for line in self.lines:
            yield line


def chunk(text=None, finish=None, usage=None):
    choices = [] if usage else [{"index": 0, "text": text or "", "finish_reason": finish}]
    c = {"id": "cmpl-1", "object": "text_completion", "choices": choices}
    if usage:
        c["usage"] = usage
    return "data: " + json.dumps(c)


USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
GOOD = [chunk("a"), "", chunk("b"), chunk(finish="length"), chunk(usage=USAGE), "data: [DONE]"]


@pytest.mark.parametrize("lines,error", [
    (GOOD, None),
    (GOOD[:-1], "without \\[DONE\\]"),
    (GOOD[:3] + GOOD[4:], "finish reasons"),
    (GOOD[:3] + [chunk(finish="length"), chunk(finish="stop")] + GOOD[4:], "after finish_reason"),
    (GOOD + [chunk("late")], "after \\[DONE\\]"),
    (GOOD[:4] + [chunk(usage={**USAGE, "completion_tokens": 1})] + GOOD[5:], "finish length after 1 of 2"),
    (GOOD[:1] + ['data: {"error": {"message": "boom"}}'] + GOOD[1:], "error in stream"),
    (GOOD[:1] + ["data: {not json"] + GOOD[1:], None),  # json.JSONDecodeError (a ValueError)
])
def test_stream_checker_rejects_broken_streams(lines, error):
    mod = load_module()
    rec = {"ttft": None}
    run = mod.read_stream(FakeResponse(lines), chat=False, max_tokens=2, t0=0.0, rec=rec)
    if lines is GOOD:
        assert asyncio.run(run)["completion_tokens"] == 2
        assert rec["ttft"] is not None
    elif error is None:
        with pytest.raises(ValueError):
            asyncio.run(run)
    else:
        with pytest.raises(mod.Malformed, match=error):
            asyncio.run(run)


def test_help():
    r = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--compare-cache" in r.stdout
