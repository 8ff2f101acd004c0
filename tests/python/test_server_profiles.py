"""`agentkv serve` finds the relay and DroidSpeak profiles of the model it
serves in --profile-dir (default profiles/, where the default model's are
committed), so kv_sharing relay and droidspeak run on a server started
without --relay-profile or --droidspeak-profile; elsewhere they stay a 400
that says what to pass."""
import json

import pytest

from server_util import assert_openai_error

RELAY = "profiles/smollm2-135m-instruct-q4_1.relay.json"
DROIDSPEAK = "profiles/smollm2-135m-instruct-q4_1.droidspeak.json"
CONTEXT = "The report lists three cities: Lyon, Graz and Turku, and the rivers that cross them. " * 4


@pytest.fixture(scope="module")
def adapters(make_adapter, tmp_path_factory):
    root = tmp_path_factory.mktemp("profiles")
    return {name: make_adapter(root / name, seed) for name, seed in (("plan", 1), ("action", 2))}


def complete(server, body):
    status, data = server.post_json("/v1/completions", {"max_tokens": 3, "temperature": 0, **body})
    return status, json.loads(data)


def test_a_default_server_runs_relay_and_droidspeak(start_server, adapters, repo_root):
    assert (repo_root / RELAY).is_file() and (repo_root / DROIDSPEAK).is_file()
    s = start_server("--kv-cache-mb", 64, "--max-model-len", 1024,
                     *(f"--adapter={name}={path}" for name, path in adapters.items()))
    log = s.log(200)
    # Found by model id; the snapshots are left out (the default scheme is none).
    assert f"relay profile {RELAY} (found by model id; no hidden-state snapshots" in log, log
    assert f"droidspeak profile {DROIDSPEAK} (found by model id; no hidden-state snapshots" in log, log
    # relay: a chain whose second request reuses the first one's output.
    status, first = complete(s, {"prompt": CONTEXT})
    assert status == 200, first
    status, r = complete(s, {"prompt": "Another start. " + CONTEXT + first["choices"][0]["text"],
                             "kv_sharing": "relay"})
    assert status == 200, r
    assert r["usage"]["kv_sharing"] == "relay", r["usage"]
    assert r["usage"]["prompt_tokens_details"].get("reused_tokens", 0) > 0, r["usage"]
    # droidspeak: plan's K/V of the context, reused by action.
    status, first = complete(s, {"model": "plan", "prompt": CONTEXT, "kv_sharing": "droidspeak"})
    assert status == 200, first
    status, r = complete(s, {"model": "action", "prompt": CONTEXT + first["choices"][0]["text"],
                             "kv_sharing": "droidspeak"})
    assert status == 200, r
    assert r["usage"]["kv_sharing"] == "droidspeak", r["usage"]
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] >= 64, r["usage"]


def test_explicit_layers_are_not_overridden(start_server):
    """--droidspeak-layers wins over the profile, and the server's default
    scheme keeps its snapshots."""
    s = start_server("--kv-cache-mb", 64, "--droidspeak-layers", "0,5", "--kv-sharing", "relay")
    log = s.log(200)
    assert "droidspeak profile" not in log, log
    assert f"relay profile {RELAY} (found by model id)" in log, log


@pytest.mark.parametrize("where", ["", "empty"])
def test_without_a_profile_relay_is_a_400_that_says_what_to_pass(start_server, tmp_path, where):
    d = tmp_path / "none"
    d.mkdir()
    # A profile of another model is passed over.
    (d / "other.relay.json").write_text(json.dumps({"format": "agentkv-relay-profile", "version": 1,
                                                    "model": {"id": "0" * 32, "name": "other"},
                                                    "layers": {"l_start": 1, "l_det": 3, "l_end": 12}}))
    s = start_server("--kv-cache-mb", 64, "--profile-dir", "" if where == "" else d)
    if where:
        assert f"no relay profile of this model in '{d}'" in s.log(200)
    status, data = s.post_json("/v1/completions", {"prompt": "x", "max_tokens": 1, "kv_sharing": {"scheme": "relay"}})
    err = assert_openai_error(status, data, 400)
    assert "needs its layers l_start, l_det and l_end" in err["message"], err
    assert "--relay-profile" in err["message"], err
    # The request's own layers still run.
    status, data = s.post_json("/v1/completions", {"prompt": "x", "max_tokens": 1,
                                                   "kv_sharing": {"scheme": "relay", "l_start": 1, "l_det": 3,
                                                                  "l_end": 12}})
    assert status == 200, data
