"""Per-model scheme defaults (issue 28, item 4): tools/scheme_defaults.py
chooses each segment-reuse scheme's default from a bench-fidelity run by the
documented rule, and `agentkv serve` applies the file of the model it serves
(found by model id in --profile-dir, or --scheme-defaults) below a request's
own parameters and the server's flags."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "scheme_defaults.py"
# The default model's content id, as the committed profiles record it.
MODEL_ID = json.loads((ROOT / "profiles" / "smollm2-135m-instruct-q4_1.relay.json").read_text())["model"]["id"]


def row(label, scores, kls, reuses, **params):
    r = {"task": "retrieval", "label": label, "scores": scores, "kls": kls, "reuses": reuses}
    if params:
        r["kv_sharing"] = params
    return r


def choose(tmp_path, rows, *flags, model_id="abc"):
    res = tmp_path / "results.json"
    res.write_text(json.dumps({"model": "/m/Model.Q4_1.gguf", "model_id": model_id, "rows": rows}))
    out = tmp_path / "d.defaults.json"
    r = subprocess.run([sys.executable, str(TOOL), str(res), "--out", str(out), *flags],
                       capture_output=True, text=True)
    return r, (json.loads(out.read_text()) if r.returncode == 0 else None)


def test_the_cheapest_setting_within_both_bounds_is_chosen(tmp_path):
    full = row("full", [1, 1, 1, 1], [0] * 4, [0] * 4)
    rows = [full,
            # epic: 16 is cheaper but loses 25 points; 64 loses none.
            row("epic:16", [1, 0, 1, 1], [0.01] * 4, [0.8] * 4, scheme="epic", recompute_tokens=16),
            row("epic:64", [1, 1, 1, 1], [0.01] * 4, [0.5] * 4, scheme="epic", recompute_tokens=64),
            # cacheblend: 0.15 within both bounds and cheaper than 0.5.
            row("cacheblend:0.15", [1, 1, 1, 1], [0.04] * 4, [0.7] * 4, scheme="cacheblend", ratio=0.15),
            row("cacheblend:0.5", [1, 1, 1, 1], [0.01] * 4, [0.4] * 4, scheme="cacheblend", ratio=0.5),
            # sparsex: the cheap one is over the KL bound.
            row("sparsex:0.15:boundary_layer=0", [1, 1, 1, 1], [0.06] * 4, [0.6] * 4, scheme="sparsex", ratio=0.15,
                boundary_layer=0),
            row("sparsex:0.5", [1, 1, 1, 1], [0.02] * 4, [0.3] * 4, scheme="sparsex", ratio=0.5),
            # naive: nothing qualifies.
            row("naive", [0, 0, 1, 1], [0.2] * 4, [0.9] * 4, scheme="naive")]
    r, d = choose(tmp_path, rows)
    assert r.returncode == 0, r.stderr
    assert d["format"] == "agentkv-scheme-defaults" and d["model"] == {"id": "abc", "name": "Model.Q4_1"}
    assert d["schemes"] == {"epic": {"recompute_tokens": 64}, "cacheblend": {"ratio": 0.15},
                            "sparsex": {"ratio": 0.5}}
    assert d["no_setting"] == ["naive"]
    assert d["chosen"]["cacheblend"]["kv_computed"] == 0.3
    assert d["chosen"]["cacheblend"]["task"] == "retrieval" and d["chosen"]["cacheblend"]["prompts"] == 4
    # Looser bounds let the cheaper settings in.
    r, d = choose(tmp_path, rows, "--max-loss", "30", "--max-kl", "0.1")
    assert r.returncode == 0, r.stderr
    assert d["schemes"]["epic"] == {"recompute_tokens": 16}
    assert d["schemes"]["sparsex"] == {"ratio": 0.15, "boundary_layer": 0}


def test_merge_adds_a_scheme_measured_on_another_task(tmp_path):
    full = row("full", [1, 1], [0, 0], [0, 0])
    r, _ = choose(tmp_path, [full, row("epic:64", [1, 1], [0.01] * 2, [0.5] * 2, scheme="epic", recompute_tokens=64),
                             row("naive", [0, 0], [0.3] * 2, [0.9] * 2, scheme="naive")])
    assert r.returncode == 0, r.stderr
    agents = [dict(x, task="agents") for x in (
        full, row("relay", [0, 1], [0.06] * 2, [0.3] * 2, scheme="relay"),
        row("relay:prefix_tokens=16", [1, 1], [0.03] * 2, [0.25] * 2, scheme="relay", prefix_tokens=16))]
    r, d = choose(tmp_path, agents, "--merge")
    assert r.returncode == 0, r.stderr
    assert d["schemes"] == {"epic": {"recompute_tokens": 64}, "relay": {"prefix_tokens": 16}}
    assert d["chosen"]["relay"]["task"] == "agents" and d["chosen"]["epic"]["task"] == "retrieval"
    assert d["no_setting"] == ["naive"] and len(d["sources"]) == 2
    r, _ = choose(tmp_path, agents, "--merge", model_id="other")
    assert r.returncode != 0 and "not a defaults file of this model" in r.stderr
    r, _ = choose(tmp_path, agents, "--merge", "--max-kl", "0.1")
    assert r.returncode != 0 and "another rule" in r.stderr


def test_results_it_cannot_judge_are_refused(tmp_path):
    full = row("full", [1, 1], [0, 0], [0, 0])
    res = tmp_path / "old.json"
    res.write_text(json.dumps({"rows": [full]}))
    r = subprocess.run([sys.executable, str(TOOL), str(res), "--out", str(tmp_path / "x")], capture_output=True,
                       text=True)
    assert r.returncode != 0 and "no model_id" in r.stderr
    r, _ = choose(tmp_path, [full, row("epic:8", [1], [0.0], [0.5], scheme="epic", recompute_tokens=8)])
    assert r.returncode != 0 and "1 prompts against full's 2" in r.stderr
    r, _ = choose(tmp_path, [full, row("epic:8", [1, 1], [0, 0], [0.5, 0.5])])  # no kv_sharing
    assert r.returncode != 0 and "no kv_sharing parameters" in r.stderr


def defaults_file(path, schemes, model_id=MODEL_ID):
    path.write_text(json.dumps({"format": "agentkv-scheme-defaults", "version": 1,
                                "model": {"id": model_id, "name": "test"}, "schemes": schemes}))
    return path


def test_serve_applies_the_models_defaults_below_the_request(start_server, tmp_path):
    d = tmp_path / "profiles"
    d.mkdir()
    defaults_file(d / "m.defaults.json", {"epic": {"recompute_tokens": 0}})
    s = start_server("--kv-cache-mb", 64, "--profile-dir", d)
    assert f"scheme defaults {d / 'm.defaults.json'} (found by model id)" in s.log(200)
    doc = " ".join(f"Fact {i}: the river number {i} flows north past the old mill." for i in range(12))
    computed = {}
    for name, sharing in (("file", {"scheme": "epic"}), ("zero", {"scheme": "epic", "recompute_tokens": 0}),
                          ("sixty-four", {"scheme": "epic", "recompute_tokens": 64})):
        # Each in a cache namespace of its own: the document cached alone, then reused behind another start.
        for prompt, kv in (("Notes. " + doc, None), ("A different start, then: " + doc + " Which river?", sharing)):
            body = {"prompt": prompt, "max_tokens": 1, "temperature": 0, "cache_salt": name}
            if kv:
                body["kv_sharing"] = kv
            status, data = s.post_json("/v1/completions", body)
            assert status == 200, data
        details = json.loads(data)["usage"]["prompt_tokens_details"]
        assert details.get("reused_tokens", 0) >= 64, (name, details)
        computed[name] = details["computed_token_layers"]
    # The file's 0 applies where the request names none, and a request's own value wins over it.
    assert computed["file"] == computed["zero"] < computed["sixty-four"], computed
    # --no-scheme-defaults: the built-in defaults, as the benches run them.
    s = start_server("--kv-cache-mb", 64, "--profile-dir", d, "--no-scheme-defaults")
    assert "scheme defaults" not in s.log(200)


def test_a_file_of_another_model_or_a_bad_one_stops_serve(serve_binary, model_path, tmp_path):
    for schemes, model_id, says in (({}, "0" * 32, "measured on another model"),
                                    ({"epic": {"ratio": 0.5}}, MODEL_ID, "ratio"),
                                    # layers are the profiles'
                                    ({"droidspeak": {"critical_layers": [3]}}, MODEL_ID, "critical_layers"),
                                    # a layer past the model's
                                    ({"sparsex": {"boundary_layer": -1}}, MODEL_ID, "boundary_layer")):
        f = defaults_file(tmp_path / "bad.defaults.json", schemes, model_id)
        r = subprocess.run([str(serve_binary), "serve", "-m", str(model_path), "--port", "0", "--kv-cache-mb", "16",
                            "--scheme-defaults", str(f)], capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and r.returncode < 128, (r.returncode, r.stderr)
        assert "scheme defaults" in r.stderr and says in r.stderr, r.stderr
