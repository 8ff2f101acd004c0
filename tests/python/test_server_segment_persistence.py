"""serve --segment-dir (issue 11, SparseX §4): frozen segments outlive a
restart. They are saved after the drain on SIGTERM, then recomputed and
pinned under their old ids, per tenant, before the next server reports ready.
A file for another model, a corrupt file and a bad entry are each a warning
that skips what it concerns, and the server starts. A missing directory
fails before the model loads."""
import json
import subprocess

from server_util import assert_openai_error

# The helpers and API keys of the frozen-segment tests.
from test_server_segments import KEY_A, KEY_B, call, create, doc, listed, tokens_of


def flags(seg_dir):
    return ["--segment-dir", seg_dir, "--block-size", 16, "--kv-cache-mb", 64, "--max-model-len", 512,
            "--api-key", f"{KEY_A}=tenant-a", "--api-key", f"{KEY_B}=tenant-b"]


def reused(server, prompt, key=KEY_A, salt=None):
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0, "kv_sharing": {"scheme": "naive"}}
    if salt:
        body["cache_salt"] = salt
    status, data = call(server, "POST", "/v1/completions", body, key)
    assert status == 200, data
    return (json.loads(data)["usage"].get("prompt_tokens_details") or {}).get("reused_tokens", 0)


def test_segments_survive_a_restart_under_their_ids(start_server, tmp_path):
    first = start_server(*flags(tmp_path))
    toks_a = tokens_of(first, doc("apples"))
    toks_b = tokens_of(first, doc("plums"))
    seg_a = create(first, {"tokens": toks_a, "cache_salt": "salt-1"})
    seg_b = create(first, {"tokens": toks_b}, key=KEY_B)
    gone = create(first, {"text": doc("figs")})
    status, data = call(first, "DELETE", f"/v1/segments/{gone['id']}")
    assert status == 200, data
    assert first.stop() == 0
    assert "saved 2 frozen segments" in first.log(), first.log()
    saved = json.loads((tmp_path / "segments.json").read_text())
    assert sorted(s["id"] for s in saved["segments"]) == sorted([seg_a["id"], seg_b["id"]])

    second = start_server(*flags(tmp_path))
    assert "restoring 2 frozen segments" in second.log(), second.log()
    mine = listed(second)
    assert set(mine) == {seg_a["id"]}, mine  # tenant b's stays b's
    a = mine[seg_a["id"]]
    assert (a["tokens"], a["blocks"], a["cache_salt"], a["evicted"]) == (len(toks_a), seg_a["blocks"], "salt-1", False)
    assert set(listed(second, KEY_B)) == {seg_b["id"]}
    # Pinned again: hit from an offset, in its namespace only.
    lead = tokens_of(second, "Read this first:")
    assert reused(second, lead + toks_a + [13], salt="salt-1") >= 16 * (seg_a["blocks"] - 1)
    assert reused(second, lead + toks_a + [13], salt="salt-2") == 0
    # New segments do not take a restored id; restored ones delete as before.
    new = create(second, {"text": doc("kiwis")})
    assert new["id"] not in (seg_a["id"], seg_b["id"])
    status, data = call(second, "DELETE", f"/v1/segments/{seg_a['id']}")
    assert status == 200, data


def test_bad_files_are_warnings_and_the_server_starts(start_server, tmp_path):
    # A good file first, for this model's id.
    first = start_server(*flags(tmp_path))
    seg = create(first, {"text": doc("limes")})
    assert first.stop() == 0
    path = tmp_path / "segments.json"
    saved = json.loads(path.read_text())

    # A bad entry and an entry the engine refuses are skipped; the good one is restored.
    bad = dict(saved)
    bad["segments"] = saved["segments"] + [
        {"id": "seg-90", "tenant": "tenant-a", "cache_salt": "", "tokens": "not a list"},
        {"id": "seg-91", "tenant": "tenant-a", "cache_salt": "", "tokens": [10 ** 8] * 20},  # outside the vocabulary
        {"id": "../etc", "tenant": "tenant-a", "cache_salt": "", "tokens": saved["segments"][0]["tokens"]},
    ]
    path.write_text(json.dumps(bad))
    s = start_server(*flags(tmp_path))
    log = s.log()
    assert "segment #1 skipped" in log and "'seg-91'" in log and "'../etc'" in log, log
    assert set(listed(s)) == {seg["id"]}
    assert s.stop() == 0

    # Another model's file: every segment skipped, with the reason.
    other = dict(saved, model_id="0" * 32)
    path.write_text(json.dumps(other))
    s = start_server(*flags(tmp_path))
    assert "another model file" in s.log(), s.log()
    assert listed(s) == {}
    assert s.stop() == 0  # and it saves its own (empty) set over the stale one
    assert json.loads(path.read_text())["segments"] == []

    # Not JSON at all (a torn write).
    path.write_text('{"format": "agentkv-segments", "segm')
    s = start_server(*flags(tmp_path))
    assert "not valid JSON" in s.log(), s.log()
    assert listed(s) == {}
    status, data = call(s, "DELETE", "/v1/segments/seg-1")
    assert_openai_error(status, data, 404, code="segment_not_found")


def test_a_missing_segment_dir_fails_before_serving(serve_binary, model_path, tmp_path):
    r = subprocess.run([str(serve_binary), "serve", "--model", str(model_path), "--port", "0",
                        "--segment-dir", str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "--segment-dir" in r.stderr and "not a directory" in r.stderr, r.stderr
