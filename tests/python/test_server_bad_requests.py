"""Malformed requests against a live `agentkv serve`, sent as raw HTTP (no
client library to tidy them up): each must get the exact status and OpenAI's
error JSON, and the server must keep serving afterwards."""
import json

import pytest

from server_util import assert_openai_error

KEY = "sk-test-key"
MAX_MODEL_LEN = 256
MESSAGES = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def server(start_module_server):
    return start_module_server("--max-model-len", MAX_MODEL_LEN, "--kv-cache-mb", 32, "--api-key",
                               f"{KEY}=tenant-a")


@pytest.fixture(scope="module")
def model_name(model_path):
    return model_path.stem  # the default --served-model-name


AUTH = {"Authorization": f"Bearer {KEY}"}


def send(server, path, body, headers=None):
    """POSTs `body` (an object, or raw bytes) with the valid key unless
    `headers` replaces it; returns (status, body bytes)."""
    status, _, data = server.request("POST", path, body, headers if headers is not None else AUTH)
    return status, data


# (id, endpoint, body: a dict merged over a valid request or raw bytes, status, param or None)
CMPL = "/v1/completions"
CHAT = "/v1/chat/completions"
CASES = [
    # wrong types, field by field
    ("prompt-int", CMPL, {"prompt": 123}, 400, "prompt"),
    ("prompt-object", CMPL, {"prompt": {"text": "hi"}}, 400, "prompt"),
    ("prompt-mixed-ids", CMPL, {"prompt": [1, "a"]}, 400, "prompt"),
    ("prompt-float-id", CMPL, {"prompt": [1, 2.5]}, 400, "prompt"),
    ("prompt-negative-id", CMPL, {"prompt": [1, -1]}, 400, "prompt"),
    ("prompt-id-past-vocab", CMPL, {"prompt": [1, 10_000_000]}, 400, "prompt"),
    ("prompt-batch-mixed", CMPL, {"prompt": ["a", [1]]}, 400, "prompt"),
    ("prompt-batch-id-past-vocab", CMPL, {"prompt": [[1], [10_000_000]]}, 400, "prompt"),
    ("prompt-empty-ids", CMPL, {"prompt": []}, 400, "prompt"),
    ("model-int", CMPL, {"model": 5}, 400, "model"),
    ("max-tokens-string", CMPL, {"max_tokens": "16"}, 400, "max_tokens"),
    ("max-tokens-float", CMPL, {"max_tokens": 4.0}, 400, "max_tokens"),
    ("max-tokens-zero", CMPL, {"max_tokens": 0}, 400, "max_tokens"),
    ("max-tokens-negative", CMPL, {"max_tokens": -5}, 400, "max_tokens"),
    ("max-tokens-huge", CMPL, {"max_tokens": 10**9}, 400, "max_tokens"),
    ("max-tokens-2^64", CMPL, {"max_tokens": 2**64}, 400, None),
    ("temperature-string", CMPL, {"temperature": "hot"}, 400, "temperature"),
    ("temperature-high", CMPL, {"temperature": 3}, 400, "temperature"),
    ("temperature-negative", CMPL, {"temperature": -0.1}, 400, "temperature"),
    ("top-p-zero", CMPL, {"top_p": 0}, 400, "top_p"),
    ("top-p-high", CMPL, {"top_p": 1.5}, 400, "top_p"),
    ("seed-string", CMPL, {"seed": "x"}, 400, "seed"),
    ("stop-int", CMPL, {"stop": 5}, 400, "stop"),
    ("stop-empty", CMPL, {"stop": ""}, 400, "stop"),
    ("stop-too-many", CMPL, {"stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ("stop-list-of-int", CMPL, {"stop": [1]}, 400, "stop"),
    ("stream-string", CMPL, {"stream": "yes"}, 400, "stream"),
    ("stream-options-without-stream", CMPL, {"stream_options": {"include_usage": True}}, 400, "stream_options"),
    ("include-usage-string", CMPL, {"stream": True, "stream_options": {"include_usage": "y"}}, 400,
     "stream_options.include_usage"),
    ("logprobs-21", CMPL, {"logprobs": 21}, 400, "logprobs"),
    ("logprobs-negative", CMPL, {"logprobs": -1}, 400, "logprobs"),
    ("logprobs-bool", CMPL, {"logprobs": True}, 400, "logprobs"),
    ("echo-string", CMPL, {"echo": "no"}, 400, "echo"),
    ("n-0", CMPL, {"n": 0}, 400, "n"),
    ("n-17", CMPL, {"n": 17}, 400, "n"),
    ("n-string", CMPL, {"n": "2"}, 400, "n"),
    ("top-k-string", CMPL, {"top_k": "5"}, 400, "top_k"),
    ("top-k-minus-2", CMPL, {"top_k": -2}, 400, "top_k"),
    ("min-p-high", CMPL, {"min_p": 1.5}, 400, "min_p"),
    ("repetition-penalty-zero", CMPL, {"repetition_penalty": 0}, 400, "repetition_penalty"),
    ("repetition-penalty-string", CMPL, {"repetition_penalty": "1.1"}, 400, "repetition_penalty"),
    ("frequency-penalty-high", CMPL, {"frequency_penalty": 2.5}, 400, "frequency_penalty"),
    ("presence-penalty-low", CMPL, {"presence_penalty": -2.5}, 400, "presence_penalty"),
    ("logit-bias-past-vocab", CMPL, {"logit_bias": {"10000000": 1}}, 400, "logit_bias"),
    ("logit-bias-vocab-size", CMPL, {"logit_bias": {"49152": 1}}, 400, "logit_bias"),
    ("logit-bias-not-id", CMPL, {"logit_bias": {"hello": 1}}, 400, "logit_bias"),
    ("logit-bias-too-big", CMPL, {"logit_bias": {"5": 101}}, 400, "logit_bias"),
    ("logit-bias-pair-text", CMPL, {"logit_bias": [["hello", 1]]}, 400, "logit_bias"),
    ("stop-token-ids-past-vocab", CMPL, {"stop_token_ids": [10_000_000]}, 400, "stop_token_ids"),
    ("ignore-eos-string", CMPL, {"ignore_eos": "yes"}, 400, "ignore_eos"),
    ("cache-salt-int", CMPL, {"cache_salt": 5}, 400, "cache_salt"),
    ("cache-salt-empty", CMPL, {"cache_salt": ""}, 400, "cache_salt"),
    ("missing-prompt", CMPL, {"prompt": None}, 400, "prompt"),
    ("unknown-model", CMPL, {"model": "gpt-4"}, 404, None),
    ("prompt-over-context-text", CMPL, {"prompt": "hello " * (2 * MAX_MODEL_LEN)}, 400, None),
    ("prompt-over-context-ids", CMPL, {"prompt": [1] * (MAX_MODEL_LEN + 8)}, 400, None),
    # chat
    ("missing-messages", CHAT, {"messages": None}, 400, "messages"),
    ("empty-messages", CHAT, {"messages": []}, 400, "messages"),
    ("messages-string", CHAT, {"messages": "hi"}, 400, "messages"),
    ("message-not-object", CHAT, {"messages": [5]}, 400, "messages[0]"),
    ("message-no-role", CHAT, {"messages": [{"content": "hi"}]}, 400, "messages[0].role"),
    ("message-bad-role", CHAT, {"messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages[0].role"),
    ("message-no-content", CHAT, {"messages": [{"role": "user"}]}, 400, "messages[0].content"),
    ("message-content-int", CHAT, {"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
    ("top-logprobs-21", CHAT, {"logprobs": True, "top_logprobs": 21}, 400, "top_logprobs"),
    ("chat-n-17", CHAT, {"n": 17}, 400, "n"),
    ("chat-presence-penalty-high", CHAT, {"presence_penalty": 2.01}, 400, "presence_penalty"),
    ("chat-logit-bias-past-vocab", CHAT, {"logit_bias": {"49152": -100}}, 400, "logit_bias"),
    ("top-logprobs-negative", CHAT, {"logprobs": True, "top_logprobs": -1}, 400, "top_logprobs"),
    ("top-logprobs-without-logprobs", CHAT, {"top_logprobs": 2}, 400, "top_logprobs"),
    ("chat-logprobs-int", CHAT, {"logprobs": 3}, 400, "logprobs"),
    ("max-completion-tokens-negative", CHAT, {"max_completion_tokens": -1}, 400, "max_completion_tokens"),
    ("chat-unknown-model", CHAT, {"model": "no-such-model"}, 404, None),
    ("chat-over-context", CHAT, {"messages": [{"role": "user", "content": "word " * (2 * MAX_MODEL_LEN)}]}, 400,
     None),
    # bodies that are not a request at all
    ("not-json", CMPL, b'{"prompt": "hi", ', 400, None),
    ("json-array", CMPL, b'[1, 2, 3]', 400, None),
    ("json-null", CHAT, b'null', 400, None),
    ("empty-body", CHAT, b'', 400, None),
    ("invalid-utf8", CMPL, b'{"model": "%MODEL%", "prompt": "caf\xc3\x28 \xff\xfe"}', 400, None),
    ("invalid-utf8-key", CHAT, b'{"messages\xff": []}', 400, None),
    ("duplicate-key", CMPL, b'{"model": "%MODEL%", "prompt": "a", "prompt": "b"}', 400, "prompt"),
    ("deep-nesting", CMPL, b'{"prompt": ' + b'[' * 100 + b']' * 100 + b'}', 400, None),
]


def build_body(endpoint, body, model_name):
    if isinstance(body, bytes):
        return body.replace(b"%MODEL%", model_name.encode())
    base = {"model": model_name, "max_tokens": 4}
    base.update({"prompt": "Hello"} if endpoint == CMPL else {"messages": MESSAGES})
    base.update(body)
    return {k: v for k, v in base.items() if v is not None}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_request(server, model_name, case):
    _, endpoint, body, status, param = case
    got_status, data = send(server, endpoint, build_body(endpoint, body, model_name))
    err = assert_openai_error(got_status, data, status, param=param)
    if status == 404:
        assert err["code"] == "model_not_found", err


def test_over_context_error_names_the_limit(server, model_name):
    status, data = send(server, CMPL, {"model": model_name, "prompt": [1] * (MAX_MODEL_LEN + 8)})
    err = assert_openai_error(status, data, 400)
    assert str(MAX_MODEL_LEN) in err["message"], err


def test_max_tokens_is_clipped_to_the_context_left(server, model_name):
    # Not an error (as vLLM): the completion stops with "length" where the context ends.
    status, data = send(server, CMPL, {"model": model_name, "prompt": [1] * (MAX_MODEL_LEN - 8), "max_tokens": 32,
                                       "temperature": 0})
    assert status == 200, data
    body = json.loads(data)
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["prompt_tokens"] == MAX_MODEL_LEN - 8


def test_prompt_plus_completion_fits_max_model_len(server, model_name):
    status, data = send(server, CMPL, {"model": model_name, "prompt": [1] * (MAX_MODEL_LEN - 8), "max_tokens": 32,
                                       "temperature": 0})
    assert status == 200, data
    usage = json.loads(data)["usage"]
    assert usage["total_tokens"] <= MAX_MODEL_LEN, usage


def test_ten_megabyte_body_is_413(server, model_name):
    body = json.dumps({"model": model_name, "prompt": "x" * (10 << 20)}).encode()
    try:
        status, data = send(server, CMPL, body)
    except (BrokenPipeError, ConnectionResetError) as e:
        pytest.fail(f"the server cut the connection instead of answering 413: {e!r}")
    assert_openai_error(status, data, 413)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY},
                                     {"Authorization": f"Basic {KEY}"}, {"Authorization": "Bearer "}],
                         ids=["none", "wrong-key", "no-scheme", "basic", "empty"])
def test_unauthorized(server, model_name, headers):
    status, data = send(server, CMPL, {"model": model_name, "prompt": "Hi", "max_tokens": 1}, headers)
    assert_openai_error(status, data, 401)


def test_unknown_route_is_404(server):
    status, _, data = server.request("GET", "/v1/engines", headers=AUTH)
    assert status == 404


def test_still_serving_after_bad_requests(server, model_name):
    # Runs last in this module (pytest keeps file order): everything above
    # was answered, and the server still works.
    for endpoint, extra in ((CMPL, {"prompt": "The capital of France is"}),
                            (CHAT, {"messages": [{"role": "user", "content": "What is the capital of France?"}]})):
        status, data = send(server, endpoint, {"model": model_name, "max_tokens": 8, "temperature": 0, **extra})
        assert status == 200, data
        body = json.loads(data)
        assert body["choices"][0]["finish_reason"] in ("stop", "length")
        assert body["usage"]["completion_tokens"] >= 1
    status, _, _ = server.request("GET", "/health")
    assert status == 200
    assert server.proc.poll() is None
