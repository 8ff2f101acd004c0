"""End-to-end checks of the frozen segment pool (issue 11, SparseX §4):
POST/GET/DELETE /v1/segments on `agentkv serve` with two tenants (API keys).
A frozen segment is hit from any offset of a later prompt (kv_sharing naive:
usage.prompt_tokens_details.reused_tokens > 0), deleting it makes later
prompts recompute, another tenant neither sees nor hits it, every bad input
is an OpenAI-style 4xx after which the server still serves and nothing is
pinned, and /metrics counts frozen segments, blocks and evictions."""
import json

import pytest

from server_util import assert_openai_error, metric

KEY_A, KEY_B = "key-seg-a", "key-seg-b"
MAX_MODEL_LEN = 512


@pytest.fixture(scope="module")
def server(start_module_server):
    return start_module_server("--block-size", 16, "--kv-cache-mb", 64, "--max-model-len", MAX_MODEL_LEN,
                               "--api-key", f"{KEY_A}=tenant-a", "--api-key", f"{KEY_B}=tenant-b")


def auth(key):
    return {"Authorization": f"Bearer {key}"}


def call(server, method, path, body=None, key=KEY_A):
    status, _, data = server.request(method, path, body, auth(key))
    return status, data


def tokens_of(server, text):
    status, data = call(server, "POST", "/tokenize", {"prompt": text, "add_special_tokens": False})
    assert status == 200, data
    return json.loads(data)["tokens"]


def doc(topic, n=10):
    return " ".join(f"Fact {i} about {topic}: item {i} is stored on shelf {i * 7 % 13}." for i in range(n))


def create(server, body, key=KEY_A):
    status, data = call(server, "POST", "/v1/segments", body, key)
    assert status == 200, data
    seg = json.loads(data)
    assert seg["object"] == "segment" and seg["id"].startswith("seg-"), seg
    return seg


def listed(server, key=KEY_A):
    status, data = call(server, "GET", "/v1/segments", key=key)
    assert status == 200, data
    body = json.loads(data)
    assert body["object"] == "list", body
    return {s["id"]: s for s in body["data"]}


def complete(server, prompt, key=KEY_A, scheme="naive"):
    """usage.prompt_tokens_details of a 1-token greedy completion."""
    status, data = call(server, "POST", "/v1/completions",
                        {"prompt": prompt, "max_tokens": 1, "temperature": 0, "kv_sharing": {"scheme": scheme}}, key)
    assert status == 200, data
    return json.loads(data)["usage"].get("prompt_tokens_details") or {}


def test_frozen_segment_is_hit_from_any_offset(server):
    seg_tokens = tokens_of(server, doc("apples"))
    seg = create(server, {"tokens": seg_tokens})
    assert seg["tokens"] == len(seg_tokens) and seg["blocks"] == len(seg_tokens) // 16, seg
    assert seg["hits"] == 0 and not seg["evicted"], seg
    filler = tokens_of(server, " ".join(f"word{i}" for i in range(60)))
    question = tokens_of(server, " Where is item 3?")
    for offset in (1, 5, 23, 70):
        details = complete(server, filler[:offset] + seg_tokens + question)
        assert details.get("reused_tokens", 0) >= 16 * (seg["blocks"] - 1), (offset, details)
    mine = listed(server)
    assert seg["id"] in mine
    s = mine[seg["id"]]
    assert s["hits"] > 0 and s["last_used"] >= s["created"] and not s["evicted"], s


def test_text_segment_is_hit_inside_a_text_prompt(server):
    text = doc("pears")
    seg = create(server, {"text": text, "cache_salt": "salt-1"})
    assert seg["tokens"] == len(tokens_of(server, text)), seg
    assert seg["cache_salt"] == "salt-1"
    status, data = call(server, "POST", "/v1/completions",
                        {"prompt": "Read this. " + text + " Where is item 2?", "max_tokens": 1, "temperature": 0,
                         "cache_salt": "salt-1", "kv_sharing": {"scheme": "naive"}})
    assert status == 200, data
    assert json.loads(data)["usage"]["prompt_tokens_details"]["reused_tokens"] >= 64, data
    # Another salt is another namespace.
    status, data = call(server, "POST", "/v1/completions",
                        {"prompt": "Read this. " + text + " Where is item 2?", "max_tokens": 1, "temperature": 0,
                         "cache_salt": "salt-2", "kv_sharing": {"scheme": "naive"}})
    assert status == 200, data
    assert (json.loads(data)["usage"].get("prompt_tokens_details") or {}).get("reused_tokens", 0) == 0, data


def test_another_tenant_neither_sees_nor_hits_it(server):
    seg_tokens = tokens_of(server, doc("cherries"))
    seg = create(server, {"tokens": seg_tokens})
    assert seg["id"] not in listed(server, KEY_B)
    status, data = call(server, "DELETE", f"/v1/segments/{seg['id']}", key=KEY_B)
    assert_openai_error(status, data, 404, code="segment_not_found")
    prefix = tokens_of(server, "Some other start:")
    assert complete(server, prefix + seg_tokens + [13], key=KEY_B).get("reused_tokens", 0) == 0
    assert seg["id"] in listed(server, KEY_A)  # the failed delete left it alone
    assert complete(server, prefix + seg_tokens + [13], key=KEY_A).get("reused_tokens", 0) > 0


def test_delete_makes_later_prompts_recompute(server):
    seg_tokens = tokens_of(server, doc("dates"))
    seg = create(server, {"tokens": seg_tokens})
    before = tokens_of(server, "First look:")
    assert complete(server, before + seg_tokens + [13]).get("reused_tokens", 0) > 0
    status, data = call(server, "DELETE", f"/v1/segments/{seg['id']}")
    assert status == 200, data
    assert json.loads(data) == {"id": seg["id"], "object": "segment", "deleted": True}
    assert seg["id"] not in listed(server)
    after = tokens_of(server, "Second look, elsewhere:")
    assert complete(server, after + seg_tokens + [13]).get("reused_tokens", 0) == 0
    status, data = call(server, "DELETE", f"/v1/segments/{seg['id']}")
    assert_openai_error(status, data, 404, code="segment_not_found")


BAD_BODIES = [
    ({"text": ""}, "text"),
    ({"tokens": []}, "tokens"),
    ({}, "text"),
    ({"text": "x", "tokens": [1, 2]}, "text"),
    ({"text": 5}, "text"),
    ({"tokens": "1,2"}, "tokens"),
    ({"tokens": [1, -1] * 10}, "tokens"),
    ({"tokens": [1, 10**9] * 10}, "tokens"),
    ({"tokens": [1.5] * 20}, "tokens"),
    ({"tokens": [5] * 5}, "tokens"),                       # shorter than one KV block
    ({"tokens": [5] * (MAX_MODEL_LEN + 10)}, "tokens"),    # over the context
    ({"tokens": [5] * 20, "cache_salt": ""}, "cache_salt"),
    ({"tokens": [5] * 20, "cache_salt": 3}, "cache_salt"),
]


@pytest.mark.parametrize("body,param", BAD_BODIES)
def test_bad_segments_are_400_and_pin_nothing(server, body, param):
    frozen = metric(server.metrics(), "agentkv_frozen_blocks")
    status, data = call(server, "POST", "/v1/segments", body)
    assert_openai_error(status, data, 400, param=param)
    assert metric(server.metrics(), "agentkv_frozen_blocks") == frozen
    assert complete(server, [5, 6, 7]) is not None  # still serving


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b""])
def test_malformed_bodies_are_400(server, raw):
    status, _, data = server.request("POST", "/v1/segments", raw, auth(KEY_A))
    assert_openai_error(status, data, 400)
    assert complete(server, [5, 6, 7]) is not None


def test_unknown_id_is_404_and_wrong_methods_405(server):
    status, data = call(server, "DELETE", "/v1/segments/seg-999999")
    assert_openai_error(status, data, 404, code="segment_not_found")
    status, data = call(server, "GET", "/v1/segments/seg-1")
    assert_openai_error(status, data, 405)
    status, data = call(server, "PUT", "/v1/segments", {"text": "x"})
    assert_openai_error(status, data, 405)


def test_segments_need_an_api_key(server):
    status, _, data = server.request("GET", "/v1/segments")
    assert_openai_error(status, data, 401)
    status, _, data = server.request("POST", "/v1/segments", {"text": doc("figs")})
    assert_openai_error(status, data, 401)


def test_metrics_count_frozen_segments(server):
    seg = create(server, {"tokens": tokens_of(server, doc("grapes"))})
    m = server.metrics()
    n = len([s for s in listed(server).values() if not s["evicted"]]) + \
        len([s for s in listed(server, KEY_B).values() if not s["evicted"]])
    assert metric(m, "agentkv_frozen_segments") == n
    assert metric(m, "agentkv_frozen_blocks") >= seg["blocks"]
    assert ("agentkv_segment_evictions_total", frozenset()) in m
    # The segment's prefill ran: the largest step is within the default
    # --max-batch-tokens (512) of SmolLM2's 30 layers (no whole-prompt
    # selection here, which may add its selection layer's rows).
    assert 0 < metric(m, "agentkv_step_token_layers_max") <= 512 * 30
