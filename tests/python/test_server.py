"""End-to-end checks of `agentkv serve` through the official `openai` client:
chat and completions (streamed and not), logprobs, agreement with
`agentkv generate`, stop strings and lengths, /v1/models, /metrics, and the
prefix cache (hits, tenant isolation by API key, cache_salt)."""
import math
import re
import subprocess
import uuid

import pytest

from server_util import metric

openai = pytest.importorskip("openai")

BLOCK = 16
MODEL_NAME = "agentkv-test"
KEYS = {"alice": "key-alice-1", "alice2": "key-alice-2", "bob": "key-bob"}


@pytest.fixture(scope="module")
def server(start_module_server):
    return start_module_server("--block-size", BLOCK, "--kv-cache-mb", 64, "--max-model-len", 1024,
                               "--served-model-name", MODEL_NAME,
                               "--api-key", f"{KEYS['alice']}=alice", "--api-key", f"{KEYS['alice2']}=alice",
                               "--api-key", f"{KEYS['bob']}=bob")


def client_for(server, who="alice"):
    return openai.OpenAI(base_url=server.base_url, api_key=KEYS[who], max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def client(server):
    return client_for(server)


def long_prompt(nonce, n_items=24):
    """About 10 tokens per item; the nonce first, so no earlier request shares a block."""
    colours = ["red", "green", "blue", "yellow", "purple", "orange"]
    animals = ["cat", "dog", "horse", "parrot", "turtle", "rabbit", "fox"]
    items = " ".join(f"Item {i} is a {colours[i % 6]} {animals[i % 7]}." for i in range(n_items))
    return f"Log {nonce}. {items} The last item is"


def nonce():
    return uuid.uuid4().hex[:12]


def expected_cached(prompt_tokens):
    # Whole blocks only, and never the last prompt token (it must be computed
    # to give the first token's logits).
    return (prompt_tokens - 1) // BLOCK * BLOCK


def cached_tokens(usage):
    details = usage.prompt_tokens_details
    assert details is not None, usage
    return details.cached_tokens


# -- basic shapes ---------------------------------------------------------------------


def test_models_lists_the_served_name(server, client):
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL_NAME]
    assert models[0].object == "model"
    status, _ = server.post_json("/v1/completions", {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 1})
    assert status == 401  # keys are configured: no key, no answer
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0).models.list()


def test_chat(client):
    r = client.chat.completions.create(model=MODEL_NAME, temperature=0, max_tokens=16,
                                       messages=[{"role": "user", "content": "What is the capital of Japan?"}])
    assert r.object == "chat.completion" and r.model == MODEL_NAME and r.id.startswith("chatcmpl")
    ch = r.choices[0]
    assert ch.message.role == "assistant"
    assert "Tokyo" in ch.message.content
    assert ch.finish_reason == "stop"
    u = r.usage
    assert u.prompt_tokens > 5 and 0 < u.completion_tokens < 16
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens


def test_chat_stream_equals_non_stream(client):
    msgs = [{"role": "system", "content": "You answer briefly."},
            {"role": "user", "content": "Name three colours."}]
    full = client.chat.completions.create(model=MODEL_NAME, temperature=0, max_tokens=16, messages=msgs)
    chunks = list(client.chat.completions.create(model=MODEL_NAME, temperature=0, max_tokens=16, messages=msgs,
                                                 stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [full.choices[0].finish_reason]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    # The usage chunk comes last, with no choices.
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_completion_length_and_stream(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=8, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 8
    chunks = list(client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=8,
                                            temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


def test_stop_string(client):
    r = client.chat.completions.create(model=MODEL_NAME, temperature=0, max_tokens=64, stop=["5"],
                                       messages=[{"role": "user",
                                                  "content": "Count from 1 to 20, separated by commas."}])
    text = r.choices[0].message.content
    assert "4" in text and "5" not in text, text
    assert r.choices[0].finish_reason == "stop"
    # The same in a stream: the stop string is never sent, not even in part.
    chunks = list(client.completions.create(model=MODEL_NAME, prompt="1, 2, 3,", max_tokens=32, temperature=0,
                                            stop=[", 7"], stream=True))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert "6" in text and "7" not in text, text
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_seeded_sampling(client):
    def sample(seed):
        return client.completions.create(model=MODEL_NAME, prompt="The weather today is", max_tokens=16,
                                         temperature=0.9, top_p=0.95, seed=seed).choices[0].text
    a, b, c = sample(7), sample(7), sample(8)
    assert a == b
    assert a != c


# -- logprobs -------------------------------------------------------------------------


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL_NAME, prompt="The capital of France is", max_tokens=8,
                                  temperature=0, logprobs=3)
    ch = r.choices[0]
    lp = ch.logprobs
    n = r.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert "".join(lp.tokens) == ch.text
    assert lp.text_offset == sorted(lp.text_offset)
    for tok, chosen, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert chosen <= 0 and math.isfinite(chosen)
        assert 1 <= len(top) <= 3  # a dict: two tokens with the same text share a key
        assert all(v <= 0 for v in top.values())
        assert chosen >= max(top.values()) - 1e-5  # greedy picks the most likely token
        assert top.get(tok) == pytest.approx(chosen, abs=1e-5)


def check_chat_logprobs(content, k):
    for e in content:
        assert e.logprob <= 0 and math.isfinite(e.logprob)
        assert bytes(e.bytes).decode("utf-8", "replace") == e.token or "\ufffd" in e.token
        assert len(e.top_logprobs) == k
        tops = [t.logprob for t in e.top_logprobs]
        assert tops == sorted(tops, reverse=True) and all(t <= 0 for t in tops)
        assert e.logprob >= tops[0] - 1e-5
        assert e.top_logprobs[0].token == e.token


def test_chat_logprobs_stream_and_not(client):
    msgs = [{"role": "user", "content": "Say hello."}]
    r = client.chat.completions.create(model=MODEL_NAME, temperature=0, max_tokens=8, messages=msgs,
                                       logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    check_chat_logprobs(content, 2)
    streamed = []
    for c in client.chat.completions.create(model=MODEL_NAME, temperature=0, max_tokens=8, messages=msgs,
                                            logprobs=True, top_logprobs=2, stream=True):
        if c.choices and c.choices[0].logprobs and c.choices[0].logprobs.content:
            streamed.extend(c.choices[0].logprobs.content)
    assert [e.token for e in streamed] == [e.token for e in content]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in content], abs=1e-4)


# -- agreement with `agentkv generate` --------------------------------------------------

ROW_RE = re.compile(r"^(\d+)\s+.*?\s(-?\d+\.\d+)\s")


def cli_generate(binary, model, *args):
    r = subprocess.run([str(binary), "generate", "-m", str(model), "-t", "2", "--temp", "0", *map(str, args)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith("\n")
    logprobs = [float(m.group(2)) for m in map(ROW_RE.match, r.stderr.splitlines()) if m]
    return r.stdout[:-1], logprobs


def test_greedy_completion_equals_cli(serve_binary, model_path, client):
    prompt = "The three primary colours are"
    want, want_lps = cli_generate(serve_binary, model_path, "-p", prompt, "-n", 16, "--logprobs", 1)
    r = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=16, temperature=0, logprobs=1)
    assert r.choices[0].text == want
    assert len(want_lps) == r.usage.completion_tokens
    # The CLI prints 4 decimals; the batched server may round differently.
    assert r.choices[0].logprobs.token_logprobs == pytest.approx(want_lps, abs=2e-3)


def test_greedy_chat_equals_cli(serve_binary, model_path, client):
    question = "What is the capital of France?"
    want, _ = cli_generate(serve_binary, model_path, "--chat", question, "-n", 16)
    r = client.chat.completions.create(model=MODEL_NAME, temperature=0, max_tokens=16,
                                       messages=[{"role": "user", "content": question}])
    assert r.choices[0].message.content == want


# -- metrics --------------------------------------------------------------------------

HISTOGRAMS = ["agentkv_queue_seconds", "agentkv_prefill_seconds", "agentkv_decode_seconds", "agentkv_ttft_seconds",
              "agentkv_inter_token_seconds"]


def test_metrics_move(server, client):
    before = server.metrics()
    client.completions.create(model=MODEL_NAME, prompt="One, two, three,", max_tokens=4, temperature=0)
    after = server.metrics()
    assert metric(after, "agentkv_requests_total", status="200") >= metric(before, "agentkv_requests_total",
                                                                          status="200") + 1
    for h in HISTOGRAMS:
        assert (h + "_count", frozenset()) in after, h
    assert metric(after, "agentkv_ttft_seconds_count") >= metric(before, "agentkv_ttft_seconds_count") + 1
    assert metric(after, "agentkv_inter_token_seconds_count") >= metric(before, "agentkv_inter_token_seconds_count") + 3
    blocks = {s: metric(after, "agentkv_kv_blocks", state=s) for s in ("used", "cached", "free")}
    assert all(v >= 0 for v in blocks.values()) and sum(blocks.values()) > 0, blocks
    # 64 MiB of KV at any block size holds more than a few blocks.
    assert sum(blocks.values()) >= 8


# -- prefix cache -----------------------------------------------------------------------


def cached_completion(client, prompt, **extra):
    r = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=8, temperature=0, logprobs=2,
                                  extra_body=extra or None)
    return r, cached_tokens(r.usage)


def test_prefix_cache_hit_gives_identical_output(server, client):
    prompt = long_prompt(nonce())
    before = server.metrics()
    first, c1 = cached_completion(client, prompt)
    second, c2 = cached_completion(client, prompt)
    n = first.usage.prompt_tokens
    assert n > 3 * BLOCK
    assert c1 == 0
    assert c2 == expected_cached(n) > 0
    assert second.usage.prompt_tokens == n
    assert second.choices[0].text == first.choices[0].text
    assert second.choices[0].logprobs.tokens == first.choices[0].logprobs.tokens
    # Cached K/V are the same numbers; only the batch shape of the suffix differs.
    assert second.choices[0].logprobs.token_logprobs == pytest.approx(first.choices[0].logprobs.token_logprobs,
                                                                      abs=1e-3)
    after = server.metrics()
    assert metric(after, "agentkv_prefix_hit_tokens_total") >= metric(before, "agentkv_prefix_hit_tokens_total") + c2


def test_tenants_do_not_share_cache(server):
    alice, alice2, bob = (client_for(server, w) for w in ("alice", "alice2", "bob"))
    prompt = long_prompt(nonce())
    r, c = cached_completion(alice, prompt)
    assert c == 0
    _, c = cached_completion(bob, prompt)
    assert c == 0, "bob was served alice's blocks"
    _, c = cached_completion(alice2, prompt)  # another key of the same tenant
    assert c == expected_cached(r.usage.prompt_tokens) > 0
    _, c = cached_completion(bob, prompt)
    assert c == expected_cached(r.usage.prompt_tokens)


def test_cache_salt_isolates_within_a_tenant(server, client):
    prompt = long_prompt(nonce())
    r, c = cached_completion(client, prompt, cache_salt="salt-1")
    assert c == 0
    _, c = cached_completion(client, prompt)  # no salt: another namespace
    assert c == 0
    _, c = cached_completion(client, prompt, cache_salt="salt-2")
    assert c == 0
    _, c = cached_completion(client, prompt, cache_salt="salt-1")
    assert c == expected_cached(r.usage.prompt_tokens) > 0
    _, c = cached_completion(client_for(server, "bob"), prompt, cache_salt="salt-1")
    assert c == 0, "the same salt under another tenant must not hit"
