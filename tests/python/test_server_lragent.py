"""`agentkv serve` with the schemes whose K/V every agent shares (full,
droidspeak, lragent-base, lragent-baselr; docs/usage.md, "LRAgent"): the
shared-A groups /v1/models shows, the fallback lragent-baselr reports for
an adapter in no group (usage and /metrics), the LR cache's gauges, and
each bad request as a clear 400 while the server keeps serving."""
import json
import re
import subprocess

import pytest

from server_util import assert_openai_error, metric

BASE = "agentkv-lragent"


@pytest.fixture(scope="module")
def adapters(serve_binary, model_path, tmp_path_factory):
    r = subprocess.run([str(serve_binary), "synth-adapter", "--help"], capture_output=True, timeout=60)
    if r.returncode != 0 or not re.search(rb"Usage: \S+ synth-adapter\b", r.stdout):
        pytest.skip("the LRAgent tests need `agentkv synth-adapter` to make their adapters")
    root = tmp_path_factory.mktemp("lragent")
    out = {}
    # plan and action share their A (LRAgent's shared-A training); reflect
    # has its own; kproj also adapts k_proj, which the LR schemes refuse.
    for name, seed, extra in (("plan", 1, ["--shared-a", "team"]), ("action", 2, ["--shared-a", "team"]),
                              ("reflect", 3, []), ("kproj", 4, [])):
        targets = "q,k,v" if name == "kproj" else "q,v"
        cmd = [str(serve_binary), "synth-adapter", "--model", str(model_path), "--out", str(root / name),
               "--rank", "8", "--seed", str(seed), "--targets", targets, *extra]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        out[name] = root / name
    return out


@pytest.fixture(scope="module")
def server(start_module_server, adapters):
    args = ["--served-model-name", BASE, "--block-size", 16, "--kv-cache-mb", 64, "--max-model-len", 1024,
            "--droidspeak-layers", "0,5,9"]
    for name, path in adapters.items():
        args += ["--adapter", f"{name}={path}"]
    return start_module_server(*args)


def complete(server, model, prompt, kv_sharing, max_tokens=4):
    status, data = server.post_json("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                                        "temperature": 0, "kv_sharing": kv_sharing,
                                                        "return_token_ids": True})
    return status, json.loads(data)


def test_models_list_shared_a_groups(server):
    status, _, data = server.request("GET", "/v1/models")
    assert status == 200
    models = {m["id"]: m for m in json.loads(data)["data"]}
    assert models["plan"]["shared_a_with"] == ["action"]
    assert models["action"]["shared_a_with"] == ["plan"]
    assert models["plan"]["shared_a_group"] == models["action"]["shared_a_group"] is not None
    assert models["reflect"]["shared_a_with"] == [] and models["reflect"]["shared_a_group"] is None


def test_every_scheme_serves_an_agent_pipeline(server):
    # plan, then action on plan's context plus its output, as LRAgent's trace.
    context = "The report lists three cities: Lyon, Graz and Turku. " * 6
    for scheme in ("full", "droidspeak", "lragent-base", "lragent-baselr"):
        prompt = f"[{scheme}] {context}"
        status, first = complete(server, "plan", prompt, scheme)
        assert status == 200, first
        assert first["usage"]["kv_sharing"] == scheme
        status, second = complete(server, "action", prompt + first["choices"][0]["text"], scheme)
        assert status == 200, second
        # The context's K/V came from plan's request.
        assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= 64, (scheme, second["usage"])


def test_baselr_falls_back_for_an_adapter_in_no_group(server):
    before = metric(server.metrics(), "agentkv_lr_fallback_requests_total")
    status, r = complete(server, "reflect", "Reflect on the plan so far.", "lragent-baselr")
    assert status == 200, r
    assert r["usage"].get("lr_fallback") is True
    assert metric(server.metrics(), "agentkv_lr_fallback_requests_total") == before + 1
    status, r = complete(server, "action", "Act on the plan.", "lragent-baselr")
    assert status == 200 and "lr_fallback" not in r["usage"]
    m = server.metrics()
    assert metric(m, "agentkv_lr_cache_blocks", state="used") + metric(m, "agentkv_lr_cache_blocks",
                                                                        state="cached") > 0


@pytest.mark.parametrize("body,param,needle", [
    ({"model": "kproj", "kv_sharing": "lragent-base"}, None, "k_proj"),
    ({"model": "kproj", "kv_sharing": "lragent-baselr"}, None, "k_proj"),
    ({"model": "plan", "kv_sharing": {"scheme": "droidspeak", "critical_layers": [0, 30]}}, None, "out of range"),
    ({"model": "plan", "kv_sharing": {"scheme": "droidspeak", "critical_layers": [2, 2]}}, None, "twice"),
    ({"model": "plan", "kv_sharing": {"scheme": "droidspeak", "critical_layers": [-1]}}, None, ">= 0"),
    ({"model": "plan", "kv_sharing": {"scheme": "droidspeak", "critical_layers": 3}}, "kv_sharing.critical_layers",
     "array"),
    ({"model": "plan", "kv_sharing": {"scheme": "droidspeak", "critical_layers": ["a"]}},
     "kv_sharing.critical_layers", None),
    ({"model": "plan", "kv_sharing": {"scheme": "lragent-baselr", "ratio": 0.2}}, None, "takes no parameters"),
    ({"model": "plan", "kv_sharing": {"scheme": "cacheblend", "critical_layers": [1]}}, None, "critical_layers"),
    ({"model": "plan", "kv_sharing": "lragent"}, None, "unknown kv_sharing"),
])
def test_bad_requests_are_400s_and_the_server_goes_on(server, body, param, needle):
    status, data = server.post_json("/v1/completions", {"prompt": "Hello", "max_tokens": 2, **body})
    assert_openai_error(status, data, 400, param=param)
    if needle:
        assert needle in json.loads(data)["error"]["message"], data
    status, ok = complete(server, "plan", "Hello", "lragent-baselr")
    assert status == 200, ok


def test_a_session_protects_its_lr_cache_blocks(server):
    """An agent session keeps the LR cache's blocks of its requests as it
    keeps their K/V blocks (the agents of one trajectory read both), until
    DELETE /v1/sessions/{id}."""
    prompt = list(range(2000, 2000 + 80))
    before = metric(server.metrics(), "agentkv_lr_cache_blocks", state="protected")
    status, data = server.post_json("/v1/completions", {"model": "plan", "prompt": prompt, "max_tokens": 2,
                                                        "temperature": 0, "kv_sharing": "lragent-base",
                                                        "session_id": "lr-team", "session_retention_s": 60})
    assert status == 200, data
    m = server.metrics()
    assert metric(m, "agentkv_lr_cache_blocks", state="protected") >= before + 80 // 16
    assert metric(m, "agentkv_session_protected_blocks") >= 80 // 16
    status, _, _ = server.request("DELETE", "/v1/sessions/lr-team")
    assert status == 200
    assert metric(server.metrics(), "agentkv_lr_cache_blocks", state="protected") == before
