"""End-to-end checks of multi-adapter serving in `agentkv serve`: adapters
made by `agentkv synth-adapter`, served with --adapter, routed by `model`,
listed by /v1/models, loaded and unloaded at run time (vLLM's
/v1/load_lora_adapter and /v1/unload_lora_adapter, enabled with
--enable-lora-loading and confined to --lora-dir; the refusals are in
test_server_adapter_loading.py), the kv_sharing request field, the per-model
metrics, and the startup checks of --adapter."""
import json
import subprocess

import pytest

from server_util import assert_openai_error, metric

openai = pytest.importorskip("openai")

BASE = "agentkv-base"
KEY = "key-adapters"  # an admin key: it may load and unload
PLAIN_KEY = "key-plain"
AUTH = {"Authorization": f"Bearer {KEY}"}
INVOCATION = " Answer:"


@pytest.fixture(scope="module")
def lora_root(tmp_path_factory):
    """The server's --lora-dir; every adapter of these tests is made in it."""
    return tmp_path_factory.mktemp("adapters")


@pytest.fixture(scope="module")
def synth(make_adapter, lora_root):
    """synth(name, seed, *extra_flags) -> path of a fresh PEFT adapter directory in lora_root."""
    return lambda name, seed, *extra: make_adapter(lora_root / name, seed, *extra)


@pytest.fixture(scope="module")
def adapter_dirs(synth):
    return {
        "a": synth("a", 1),
        "b": synth("b", 2),
        "inv": synth("inv", 3, "--alora-invocation", INVOCATION),
    }


@pytest.fixture(scope="module")
def server(start_module_server, adapter_dirs, lora_root):
    return start_module_server("--served-model-name", BASE, "--block-size", 16, "--kv-cache-mb", 64,
                               "--max-model-len", 512, "--admin-api-key", f"{KEY}=t",
                               "--api-key", f"{PLAIN_KEY}=t",
                               "--enable-lora-loading", "--lora-dir", lora_root,
                               "--adapter", f"a={adapter_dirs['a']}",
                               "--adapter", f"inv={adapter_dirs['inv']}:alora")


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0, timeout=120)


def models_json(server):
    status, _, data = server.request("GET", "/v1/models", headers=AUTH)
    assert status == 200, data
    return {m["id"]: m for m in json.loads(data)["data"]}, [m["id"] for m in json.loads(data)["data"]]


def load(server, name, path, kind=None, api_key=KEY):
    body = {"lora_name": name, "lora_path": str(path)}
    if kind is not None:
        body["kind"] = kind
    return server.post_json("/v1/load_lora_adapter", body, api_key=api_key)


def unload(server, name, api_key=KEY):
    return server.post_json("/v1/unload_lora_adapter", {"lora_name": name}, api_key=api_key)


def first_logprob(client, model, prompt="The capital of France is"):
    r = client.completions.create(model=model, prompt=prompt, max_tokens=4, temperature=0, logprobs=1)
    assert r.model == model
    assert r.choices[0].finish_reason in ("stop", "length")
    return r.choices[0].logprobs.token_logprobs[0], r.choices[0].text


# -- routing ---------------------------------------------------------------------------


def test_completions_on_base_and_adapter(client):
    base_lp, base_text = first_logprob(client, BASE)
    a_lp, a_text = first_logprob(client, "a")
    assert isinstance(base_text, str) and isinstance(a_text, str)
    # A random rank-8 adapter moves the logits: the adapter was applied.
    assert base_lp != a_lp, (base_lp, a_lp)
    # Asking again (now from the prefix cache) gives the same greedy answer.
    assert first_logprob(client, "a")[1] == a_text
    assert first_logprob(client, BASE)[1] == base_text


def test_chat_on_an_adapter(client):
    r = client.chat.completions.create(model="a", max_tokens=4, temperature=0,
                                       messages=[{"role": "user", "content": "Say hi."}])
    assert r.model == "a"
    assert r.choices[0].message.role == "assistant"


def test_model_absent_means_the_base(server):
    status, data = server.post_json("/v1/completions", {"prompt": "Hello", "max_tokens": 1}, api_key=KEY)
    assert status == 200, data
    assert json.loads(data)["model"] == BASE


def test_unknown_model_is_404_listing_what_is_served(server, client):
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x", max_tokens=1)
    status, data = server.post_json("/v1/completions", {"model": "nope", "prompt": "x"}, api_key=KEY)
    err = assert_openai_error(status, data, 404, param="model", code="model_not_found")
    assert f"'{BASE}'" in err["message"] and "'a'" in err["message"], err


# -- kv_sharing ------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["none", "alora", "icarus"])
def test_kv_sharing_schemes_are_accepted(client, scheme):
    r = client.completions.create(model="inv", prompt=f"Question: what is 2+2?{INVOCATION}", max_tokens=2,
                                  temperature=0, extra_body={"kv_sharing": scheme})
    assert r.model == "inv"
    c = client.chat.completions.create(model="a", max_tokens=2, temperature=0, extra_body={"kv_sharing": scheme},
                                       messages=[{"role": "user", "content": "Hi"}])
    assert c.model == "a"


def applied(usage):
    return usage.model_dump()["kv_sharing"]


@pytest.mark.parametrize("scheme,on_inv", [("none", "none"), ("alora", "alora"), ("icarus", "none")])
def test_usage_reports_the_scheme_applied(server, client, adapter_dirs, scheme, on_inv):
    """A scheme that does not apply to the adapter's kind runs as `none`, and
    usage.kv_sharing says so instead of echoing the request."""
    r = client.completions.create(model="inv", prompt=f"Question: 3+4?{INVOCATION}", max_tokens=2, temperature=0,
                                  extra_body={"kv_sharing": scheme})
    assert applied(r.usage) == on_inv
    c = client.chat.completions.create(model="a", max_tokens=2, temperature=0, extra_body={"kv_sharing": scheme},
                                       messages=[{"role": "user", "content": "Hi"}])
    assert applied(c.usage) == "none"  # a plain LoRA shares under no scheme
    name = f"a-icarus-{scheme}"
    status, data = load(server, name, adapter_dirs["a"], kind="icarus")
    assert status == 200, data
    try:
        r = client.completions.create(model=name, prompt="Hello", max_tokens=2, temperature=0,
                                      extra_body={"kv_sharing": scheme})
        assert applied(r.usage) == ("icarus" if scheme == "icarus" else "none")
        # Streamed usage carries it too.
        chunks = list(client.completions.create(model=name, prompt="Hello", max_tokens=2, temperature=0, stream=True,
                                                stream_options={"include_usage": True},
                                                extra_body={"kv_sharing": scheme}))
        assert applied(chunks[-1].usage) == ("icarus" if scheme == "icarus" else "none")
    finally:
        assert unload(server, name)[0] == 200


def test_echo_logprobs_need_the_adapters_own_prompt_rows(server, adapter_dirs):
    """An ICaRus adapter's prompt rows are the base encoder's under every
    scheme (its own encoding pass under none, the shared one under icarus),
    so they cannot score the prompt as the adapter: a 400, not the base's
    numbers under the adapter's name. The same directory as a plain LoRA
    scores its prompt."""
    status, data = load(server, "a-icarus-echo", adapter_dirs["a"], kind="icarus")
    assert status == 200, data
    try:
        body = {"model": "a-icarus-echo", "prompt": "Hello there", "max_tokens": 1, "echo": True, "logprobs": 1}
        for scheme in ("icarus", "none", "icarus+sparsex"):
            status, data = server.post_json("/v1/completions", {**body, "kv_sharing": scheme}, api_key=KEY)
            err = assert_openai_error(status, data, 400)
            assert "base encoder" in err["message"], err
        status, data = server.post_json("/v1/completions", {**body, "model": "a", "kv_sharing": "none"}, api_key=KEY)
        assert status == 200, data
        assert json.loads(data)["choices"][0]["logprobs"]["token_logprobs"][0] is None
    finally:
        assert unload(server, "a-icarus-echo")[0] == 200


@pytest.mark.parametrize("value", ["fullshared", "", 3, ["alora"]])
def test_bad_kv_sharing_is_400(server, value):
    status, data = server.post_json("/v1/completions", {"model": "a", "prompt": "x", "kv_sharing": value},
                                    api_key=KEY)
    assert_openai_error(status, data, 400, param="kv_sharing")


@pytest.mark.parametrize("value,param,words", [
    ({"scheme": "blend"}, "kv_sharing", "unknown kv_sharing"),
    ({"ratio": 0.2}, "kv_sharing.scheme", "scheme"),
    ({"scheme": "cacheblend", "ratio": "high"}, "kv_sharing.ratio", "number"),
    ({"scheme": "cacheblend", "bogus": 1}, "kv_sharing.bogus", "unknown kv_sharing parameter"),
    ({"scheme": "epic", "recompute_tokens": 1.5}, "kv_sharing.recompute_tokens", "integer"),
    ({"scheme": "cacheblend", "ratio": 1.5}, None, "ratio must be in [0, 1]"),
    ({"scheme": "cacheblend", "ratio": -0.1}, None, "ratio must be in [0, 1]"),
    ({"scheme": "epic", "recompute_tokens": -1}, None, "recompute_tokens must be >= 0"),
    ({"scheme": "naive", "ratio": 0.3}, None, "takes no 'ratio'"),
    ({"scheme": "cacheblend", "recompute_tokens": 8}, None, "takes no 'recompute_tokens'"),
    ({"scheme": "none", "ratio": 0.3}, None, "takes no parameters"),
    ({"scheme": "sparsex", "boundary_layer": -1}, None, "boundary_layer must be >= 0"),
    ({"scheme": "sparsex", "tail_tokens": "all"}, "kv_sharing.tail_tokens", "integer"),
    ({"scheme": "cacheblend", "overflow_blocks": 1}, None, "takes no 'overflow_blocks'"),
    ({"scheme": "sparsex", "check_layer": 2}, None, "takes no 'check_layer'"),
    ({"scheme": "relay", "l_start": 1, "l_det": 3, "l_end": 31}, None, "past the model's 30 layers"),
    ({"scheme": "relay", "l_start": 4, "l_det": 2, "l_end": 12}, None, "l_start <= l_det < l_end"),
    ({"scheme": "relay", "l_start": "1", "l_det": 3, "l_end": 12}, "kv_sharing.l_start", "integer"),
    ({"scheme": "relay", "l_start": 1, "l_det": 3, "l_end": 12, "dev_threshold": -1}, None,
     "dev_threshold must be a number >= 0"),
    ({"scheme": "relay", "l_start": 1, "l_det": 3, "l_end": 12, "influence_threshold": "x"},
     "kv_sharing.influence_threshold", "number"),
    ({"scheme": "cacheblend", "suffix_tokens": 4}, None, "takes no 'suffix_tokens'"),
])
def test_bad_segment_reuse_parameters_are_400_and_the_server_goes_on(server, client, value, param, words):
    status, data = server.post_json("/v1/completions", {"prompt": "x", "max_tokens": 1, "kv_sharing": value},
                                    api_key=KEY)
    err = assert_openai_error(status, data, 400, param=param)
    assert words in err["message"], err
    r = client.completions.create(model=BASE, prompt="Hello", max_tokens=1, temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop")


def test_segment_reuse_reports_reused_tokens(server, client):
    """A document cached by one request is reused inside another prompt,
    behind another prefix: usage says how many prompt tokens were copied."""
    doc = " ".join(f"Fact {i}: the river number {i} flows north past the old mill." for i in range(12))
    client.completions.create(model=BASE, prompt="Notes. " + doc, max_tokens=1, temperature=0)
    for scheme in ({"scheme": "naive"}, {"scheme": "epic", "recompute_tokens": 8},
                   {"scheme": "cacheblend", "ratio": 0.2},
                   {"scheme": "sparsex", "ratio": 0.2, "boundary_layer": 3, "overflow_blocks": 1, "tail_tokens": 16},
                   {"scheme": "relay", "l_start": 1, "l_det": 3, "l_end": 12}):
        r = client.completions.create(model=BASE, prompt="A different start, then: " + doc + " Which river flows north?",
                                      max_tokens=2, temperature=0, extra_body={"kv_sharing": scheme})
        details = r.usage.model_dump()["prompt_tokens_details"]
        assert details.get("reused_tokens", 0) >= 64, (scheme, details)
        # The reuse rate: K/V entries copied over those of the prefilled positions.
        n, L = r.usage.prompt_tokens - details["cached_tokens"], 30
        assert details["reuse_rate"] == pytest.approx(1 - details["computed_token_layers"] / (n * L)), details
        assert 0 < details["reuse_rate"] < 1, (scheme, details)
        assert applied(r.usage) == scheme["scheme"]
    m = server.metrics()
    for name in ("naive", "epic", "cacheblend", "sparsex", "relay"):
        assert metric(m, "agentkv_scheme_reused_tokens_total", scheme=name) >= 64, name
        assert metric(m, "agentkv_scheme_computed_token_layers_total", scheme=name) > 0, name
        assert metric(m, "agentkv_scheme_reused_token_layers_total", scheme=name) > 0, name


def test_an_alora_agent_reuses_the_bases_documents_when_composed(server, client):
    """alora + a segment-reuse scheme: the aLoRA adapter keeps its exact
    prefix sharing and reuses a document the base model cached, at another
    offset; the reuse scheme alone keeps the adapter in its own lineage."""
    doc = " ".join(f"Item {i}: the crate number {i} holds {i * 3} blue marbles." for i in range(12))
    client.completions.create(model=BASE, prompt="Inventory. " + doc, max_tokens=1, temperature=0)
    prompt = "Check this list, then: " + doc + f" How many crates?{INVOCATION}"
    alone = client.completions.create(model="inv", prompt=prompt, max_tokens=2, temperature=0,
                                      extra_body={"kv_sharing": "sparsex"})
    assert alone.usage.model_dump()["prompt_tokens_details"].get("reused_tokens", 0) == 0
    for value in ("alora+sparsex", ["alora", "sparsex"], {"scheme": "alora", "reuse": "sparsex", "ratio": 0.3}):
        # Each form in a namespace of its own: the document is cached there first.
        client.completions.create(model=BASE, prompt="Inventory. " + doc, max_tokens=1, temperature=0,
                                  extra_body={"cache_salt": json.dumps(value)})
        r = client.completions.create(model="inv", prompt=prompt, max_tokens=2, temperature=0,
                                      extra_body={"kv_sharing": value, "cache_salt": json.dumps(value)})
        details = r.usage.model_dump()["prompt_tokens_details"]
        assert details.get("reused_tokens", 0) >= 64, (value, details)
        assert applied(r.usage) == "alora+sparsex"
    assert metric(server.metrics(), "agentkv_scheme_reused_tokens_total", scheme="alora+sparsex") >= 3 * 64


@pytest.mark.parametrize("value,words", [
    ("sparsex+cacheblend", "two segment-reuse schemes"),
    (["alora", "icarus"], "two exact schemes"),
    ("lragent-base+sparsex", "does not compose"),
    ({"scheme": "naive", "reuse": "epic"}, "two segment-reuse schemes"),
    (["alora", "sparsex", "naive"], "composes two schemes"),
])
def test_pairs_that_do_not_compose_are_400_naming_the_pair(server, value, words):
    status, data = server.post_json("/v1/completions", {"prompt": "x", "max_tokens": 1, "kv_sharing": value},
                                    api_key=KEY)
    err = assert_openai_error(status, data, 400, param="kv_sharing")
    assert words in err["message"], err


# -- /v1/models ------------------------------------------------------------------------


def test_models_lists_the_base_then_adapters_with_kind(server, client):
    ids = [m.id for m in client.models.list().data]
    assert ids[0] == BASE and {"a", "inv"} <= set(ids[1:]), ids
    by_id, _ = models_json(server)
    assert by_id[BASE]["kind"] == "base" and by_id[BASE]["object"] == "model"
    assert "parent" not in by_id[BASE]
    assert by_id["a"]["kind"] == "lora"
    assert by_id["inv"]["kind"] == "alora"
    for name in ("a", "inv"):
        m = by_id[name]
        assert m["object"] == "model" and m["owned_by"], m
        assert m["parent"] == BASE, m
        assert isinstance(m["adapter_id"], str) and m["adapter_id"], m
    assert by_id["a"]["adapter_id"] != by_id["inv"]["adapter_id"]


# -- load / unload at run time ---------------------------------------------------------


def test_load_use_unload(server, client, adapter_dirs):
    status, data = load(server, "b", adapter_dirs["b"])
    assert status == 200, data
    assert data.decode() == "Success: LoRA adapter 'b' added successfully."
    by_id, ids = models_json(server)
    assert "b" in ids and by_id["b"]["kind"] == "lora"
    r = client.completions.create(model="b", prompt="Hello", max_tokens=2, temperature=0)
    assert r.model == "b"

    status, data = unload(server, "b")
    assert status == 200, data
    assert data.decode() == "Success: LoRA adapter 'b' removed successfully."
    assert "b" not in models_json(server)[1]
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="b", prompt="Hello", max_tokens=2)
    status, data = unload(server, "b")
    assert_openai_error(status, data, 404, param="lora_name")
    # The other adapters are untouched.
    assert client.completions.create(model="a", prompt="Hello", max_tokens=1).model == "a"


def test_load_with_a_kind_override(server, adapter_dirs):
    status, data = load(server, "a-icarus", adapter_dirs["a"], kind="icarus")
    assert status == 200, data
    try:
        assert models_json(server)[0]["a-icarus"]["kind"] == "icarus"
    finally:
        assert unload(server, "a-icarus")[0] == 200


def test_two_names_for_one_directory_share_the_adapter_id(server, adapter_dirs):
    status, data = load(server, "a-again", adapter_dirs["a"])
    assert status == 200, data
    try:
        by_id, _ = models_json(server)
        assert by_id["a-again"]["adapter_id"] == by_id["a"]["adapter_id"]
    finally:
        assert unload(server, "a-again")[0] == 200


def test_bad_adapter_path_is_400_and_the_server_keeps_serving(server, client, lora_root):
    junk = lora_root / "junk"
    junk.mkdir()
    (junk / "adapter_config.json").write_text("{not json")
    (junk / "adapter_model.safetensors").write_bytes(b"\x00" * 64)
    status, data = load(server, "junk", junk)
    assert_openai_error(status, data, 400, param="lora_path")
    # No adapter there at all: vLLM's "No adapter found" is a 404.
    status, data = load(server, "ghost", lora_root / "does-not-exist")
    assert_openai_error(status, data, 404, param="lora_path")
    ids = models_json(server)[1]
    assert "junk" not in ids and "ghost" not in ids
    assert client.completions.create(model=BASE, prompt="Hello", max_tokens=1).model == BASE
    assert client.completions.create(model="a", prompt="Hello", max_tokens=1).model == "a"


def test_load_refuses_taken_names_and_missing_fields(server, adapter_dirs):
    status, data = load(server, "a", adapter_dirs["b"])
    err = assert_openai_error(status, data, 400, param="lora_name")
    assert "already been loaded" in err["message"]
    status, data = load(server, BASE, adapter_dirs["b"])
    assert_openai_error(status, data, 400, param="lora_name")
    status, data = server.post_json("/v1/load_lora_adapter", {"lora_name": "x"}, api_key=KEY)
    assert_openai_error(status, data, 400, param="lora_path")
    status, data = server.post_json("/v1/load_lora_adapter", {"lora_path": str(adapter_dirs["b"])}, api_key=KEY)
    assert_openai_error(status, data, 400, param="lora_name")
    status, data = load(server, "x", adapter_dirs["b"], kind="qlora")
    assert_openai_error(status, data, 400, param="kind")
    status, data = server.post_json("/v1/unload_lora_adapter", {}, api_key=KEY)
    assert_openai_error(status, data, 400, param="lora_name")


def test_adapter_endpoints_need_the_api_key(server, adapter_dirs):
    before = models_json(server)[1]
    status, data = load(server, "b", adapter_dirs["b"], api_key=None)
    assert_openai_error(status, data, 401, code="invalid_api_key")
    status, data = load(server, "b", adapter_dirs["b"], api_key="wrong")
    assert_openai_error(status, data, 401, code="invalid_api_key")
    status, data = unload(server, "a", api_key=None)
    assert_openai_error(status, data, 401, code="invalid_api_key")
    # A key that is not an admin key serves completions but may not load or unload.
    status, data = load(server, "b", adapter_dirs["b"], api_key=PLAIN_KEY)
    assert_openai_error(status, data, 403, code="insufficient_permissions")
    status, data = unload(server, "a", api_key=PLAIN_KEY)
    assert_openai_error(status, data, 403, code="insufficient_permissions")
    status, data = server.post_json("/v1/completions", {"model": "a", "prompt": "Hi", "max_tokens": 1},
                                    api_key=PLAIN_KEY)
    assert status == 200, data
    assert models_json(server)[1] == before


# -- metrics ---------------------------------------------------------------------------


def test_per_model_and_per_scheme_metrics(server, client):
    before = server.metrics()
    client.completions.create(model="a", prompt="Count: one two three", max_tokens=2)
    client.completions.create(model=BASE, prompt="Count: one two three", max_tokens=2)
    after = server.metrics()
    for model in (BASE, "a"):
        assert metric(after, "agentkv_model_requests_total", model=model) >= \
            metric(before, "agentkv_model_requests_total", model=model) + 1, model
        assert metric(after, "agentkv_model_prompt_tokens_total", model=model) > \
            metric(before, "agentkv_model_prompt_tokens_total", model=model), model
        assert metric(after, "agentkv_model_completion_tokens_total", model=model) > \
            metric(before, "agentkv_model_completion_tokens_total", model=model), model
    names = {n for n, _ in after}
    assert {"agentkv_model_cached_tokens_total", "agentkv_scheme_cached_tokens_total",
            "agentkv_scheme_prompt_tokens_total"} <= names, sorted(names)
    assert sum(metric(after, "agentkv_scheme_prompt_tokens_total", scheme=s) for s in ("none", "alora", "icarus")) \
        > sum(metric(before, "agentkv_scheme_prompt_tokens_total", scheme=s) for s in ("none", "alora", "icarus"))


# -- startup ---------------------------------------------------------------------------


def test_config_file_adapters_and_flag_override(start_server, adapter_dirs, tmp_path):
    cfg = tmp_path / "serve.json"
    cfg.write_text(json.dumps({"served-model-name": BASE, "kv_sharing": "icarus",
                               "adapters": [{"name": "c", "path": str(adapter_dirs["a"]), "kind": "icarus"},
                                            f"d={adapter_dirs['b']}"]}))
    s = start_server("--config", cfg)
    status, _, data = s.request("GET", "/v1/models")
    assert status == 200, data
    listed = {m["id"]: m for m in json.loads(data)["data"]}
    assert list(listed) == [BASE, "c", "d"]
    assert listed["c"]["kind"] == "icarus" and listed["d"]["kind"] == "lora"
    # --adapter on the command line replaces the file's list.
    s2 = start_server("--config", cfg, "--adapter", f"e={adapter_dirs['a']}")
    status, _, data = s2.request("GET", "/v1/models")
    assert [m["id"] for m in json.loads(data)["data"]] == [BASE, "e"]


@pytest.mark.parametrize("args,needle", [
    (["--adapter", "no-equals-sign"], "--adapter"),
    (["--adapter", "x=/nonexistent/adapter-dir"], "does not exist"),
    (["--adapter", "x=ADAPTER", "--adapter", "x=ADAPTER"], "given twice"),
    (["--served-model-name", "same", "--adapter", "same=ADAPTER"], "served-model-name"),
    (["--adapter", "bad:name=ADAPTER"], "adapter name"),
    (["--kv-sharing", "fullshared"], "--kv-sharing"),
    (["--config", 'CFG:{"adapters": [{"name": "x"}]}'], "adapters"),
    (["--config", 'CFG:{"adapters": ["x=ADAPTER"], "adapter": ["y=ADAPTER"]}'], "set the same flag"),
    (["--config", 'CFG:{"kv_sharing": "bogus"}'], "kv-sharing"),
])
def test_bad_adapter_flags_fail_before_serving(serve_binary, model_path, adapter_dirs, tmp_path, args, needle):
    args = [a.replace("ADAPTER", str(adapter_dirs["a"])) for a in args]
    if args[-1].startswith("CFG:"):
        (tmp_path / "cfg.json").write_text(args[-1][4:])
        args = [*args[:-1], str(tmp_path / "cfg.json")]
    cmd = [str(serve_binary), "serve", "--model", str(model_path), "--port", "0", *args]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the server started with {args}: {e.stderr!r}")
    assert r.returncode != 0
    assert needle in r.stderr, r.stderr
    assert "listening" not in r.stderr


def test_bad_adapter_file_at_startup_fails_cleanly(serve_binary, model_path, tmp_path):
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "adapter_config.json").write_text("{not json")
    r = subprocess.run([str(serve_binary), "serve", "--model", str(model_path), "--port", "0",
                        "--adapter", f"j={junk}"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "error: " in r.stderr and "--adapter j" in r.stderr, r.stderr
    assert "listening" not in r.stderr
