"""POST /tokenize and /detokenize (vLLM's bodies) against a live `agentkv
serve`: the ids equal what `agentkv tokenize` prints and what a completions
prompt is tokenized to, and detokenize inverts them."""
import json
import subprocess

import pytest

MODEL = "agentkv-tok"
TEXTS = ["Hello, world!", "  leading spaces and a tab\there", "café 😀 日本語",
         "<|im_start|>user\nHi<|im_end|>\n", "x" * 300]


def post(server, path, body):
    status, data = server.post_json(path, body)
    return status, json.loads(data)


@pytest.fixture(scope="module")
def server(start_module_server):
    return start_module_server("--served-model-name", MODEL, "--max-model-len", 512, "--kv-cache-mb", 32)


def cli_tokenize(binary, model, text):
    r = subprocess.run([str(binary), "tokenize", "--model", str(model), "--", text], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    return [int(x) for x in line.split(",")] if line else []


@pytest.mark.parametrize("text", TEXTS)
def test_tokenize_equals_the_cli_and_detokenize_inverts_it(server, serve_binary, model_path, text):
    status, body = post(server, "/tokenize", {"model": MODEL, "prompt": text})
    assert status == 200, body
    assert body["tokens"] == cli_tokenize(serve_binary, model_path, text)
    assert body["count"] == len(body["tokens"])
    assert body["max_model_len"] == 512
    status, back = post(server, "/detokenize", {"model": MODEL, "tokens": body["tokens"]})
    assert status == 200, back
    assert back["prompt"] == text


def test_tokenize_counts_what_completions_bill(server):
    text = "The capital of France is"
    _, tok = post(server, "/tokenize", {"prompt": text})
    status, r = post(server, "/v1/completions", {"model": MODEL, "prompt": text, "max_tokens": 1})
    assert status == 200, r
    assert r["usage"]["prompt_tokens"] == tok["count"]


def test_tokenize_errors(server):
    status, body = post(server, "/tokenize", {"model": MODEL})
    assert status == 400 and body["error"]["param"] == "prompt"
    status, body = post(server, "/detokenize", {"tokens": [1, 10_000_000]})
    assert status == 400 and body["error"]["param"] == "tokens"
    status, body = post(server, "/tokenize", {"model": "nope", "prompt": "x"})
    assert status == 404 and body["error"]["code"] == "model_not_found"
