"""End-to-end checks of the sampling fields agents send (OpenAI, vLLM and
llama-server names) and of the request shapes beyond one prompt and one
choice: top_k, min_p, the penalties, logit_bias, stop_token_ids, top_logprobs
up to 20, n > 1 sharing one prefill, and lists of prompts. The sampler's
distributions are checked against tools/reference/sampler_ref.py in
tests/unit/runtime/sampler_test.cpp; here we check that each field reaches it."""
import json

import pytest

from server_util import metric, read_sse

openai = pytest.importorskip("openai")

BLOCK = 16
MODEL = "agentkv-sampling"
PROMPT = "The capital of France is Paris. The capital of Italy is Rome. The capital of Spain is"


@pytest.fixture(scope="module")
def server(start_module_server):
    return start_module_server("--block-size", BLOCK, "--kv-cache-mb", 64, "--max-model-len", 1024,
                               "--served-model-name", MODEL)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0, timeout=120)


def post(server, path, body):
    status, data = server.post_json(path, body)
    return status, json.loads(data)


def complete(client, prompt=PROMPT, **kw):
    extra = {k: kw.pop(k) for k in list(kw) if k in ("top_k", "min_p", "repetition_penalty", "stop_token_ids",
                                                     "ignore_eos", "kv_sharing", "cache_salt")}
    kw.setdefault("max_tokens", 8)
    kw.setdefault("temperature", 0)
    return client.completions.create(model=MODEL, prompt=prompt, extra_body=extra or None, **kw)


def test_top_k_1_is_greedy_at_any_temperature(client):
    greedy = complete(client).choices[0].text
    for seed in (1, 2, 3):
        r = complete(client, temperature=1.5, top_k=1, seed=seed)
        assert r.choices[0].text == greedy


def test_min_p_1_is_greedy_at_any_temperature(client):
    greedy = complete(client).choices[0].text
    for seed in (4, 5):
        assert complete(client, temperature=1.5, min_p=1.0, seed=seed).choices[0].text == greedy


def test_top_logprobs_20(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
                                       temperature=0, logprobs=True, top_logprobs=20)
    for t in r.choices[0].logprobs.content:
        assert len(t.top_logprobs) == 20
        lps = [a.logprob for a in t.top_logprobs]
        assert lps == sorted(lps, reverse=True)
        assert t.logprob == pytest.approx(lps[0], abs=1e-5)  # greedy took the most likely token
    c = complete(client, logprobs=20, max_tokens=2)
    assert all(len(d) >= 15 for d in c.choices[0].logprobs.top_logprobs)  # a dict: equal texts merge


def test_logit_bias_forces_and_bans(server, client):
    base = complete(client, max_tokens=4, logprobs=1)
    first = base.choices[0].logprobs.tokens[0]
    # Ban the greedy first token: the first token changes.
    ids = post(server, "/tokenize", {"model": MODEL, "prompt": first, "add_special_tokens": False})
    if ids[0] != 200:
        pytest.skip("no /tokenize")
    first_ids = ids[1]["tokens"]
    assert len(first_ids) == 1, first_ids
    banned = complete(client, max_tokens=4, logprobs=1, logit_bias={str(first_ids[0]): -100})
    assert banned.choices[0].logprobs.tokens[0] != first
    # Force a token: every generated token is it, and logprobs stay the model's own.
    forced = complete(client, max_tokens=4, logprobs=1, logit_bias={"1000": 100})
    piece = post(server, "/detokenize", {"model": MODEL, "tokens": [1000]})[1]["prompt"]
    assert forced.choices[0].logprobs.tokens == [piece] * 4
    assert all(lp < -1 for lp in forced.choices[0].logprobs.token_logprobs), "logprobs must be the raw model's"


def test_stop_token_ids_end_generation_without_emitting(client):
    r = complete(client, max_tokens=5, logit_bias={"1000": 100}, stop_token_ids=[1000])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == ""
    assert r.usage.completion_tokens == 0


def test_ignore_eos_runs_to_max_tokens(client):
    # An end-of-text token forced by bias would stop at once; ignore_eos keeps going.
    eos = 0  # SmolLM2's <|endoftext|>
    stopped = complete(client, max_tokens=4, logit_bias={str(eos): 100})
    assert stopped.choices[0].finish_reason == "stop" and stopped.usage.completion_tokens == 0
    kept = complete(client, max_tokens=4, logit_bias={str(eos): 100}, ignore_eos=True)
    assert kept.choices[0].finish_reason == "length" and kept.usage.completion_tokens == 4


def test_return_token_ids_gives_the_generated_ids(server):
    # vLLM's extension: agents append a reply's ids to the next prompt
    # instead of re-tokenizing its text. The ids decode to the text, and the
    # stream carries the same ids chunk by chunk.
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 6, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    status, r = post(server, "/v1/completions", body)
    assert status == 200
    ids = r["choices"][0]["token_ids"]
    assert len(ids) == r["usage"]["completion_tokens"] == 6
    assert post(server, "/detokenize", {"model": MODEL, "tokens": ids})[1]["prompt"] == r["choices"][0]["text"]
    status, plain = post(server, "/v1/completions", {**body, "return_token_ids": False})
    assert status == 200 and "token_ids" not in plain["choices"][0]
    status, chat = post(server, "/v1/chat/completions", {"model": MODEL, "max_tokens": 3, "temperature": 0,
                                                         "messages": [{"role": "user", "content": "Hi"}],
                                                         "return_token_ids": True})
    assert status == 200 and len(chat["choices"][0]["token_ids"]) == chat["usage"]["completion_tokens"]
    conn = server.connection()
    try:
        conn.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}),
                     headers={"Content-Type": "application/json"})
        chunks, done, bad = read_sse(conn.getresponse())
    finally:
        conn.close()
    assert done and not bad
    assert [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids", [])] == ids
    status, bad = post(server, "/v1/completions", {**body, "return_token_ids": 1})
    assert status == 400 and bad["error"]["param"] == "return_token_ids"


def distinct_ratio(tokens):
    return len(set(tokens)) / len(tokens)


@pytest.mark.parametrize("field,value", [("presence_penalty", 2.0), ("frequency_penalty", 2.0),
                                         ("repetition_penalty", 1.8)])
def test_penalties_reduce_repetition(client, field, value):
    prompt = "one one one one one one one one one one one one"
    plain = complete(client, prompt=prompt, max_tokens=24, logprobs=0)
    kw = {field: value}
    pen = complete(client, prompt=prompt, max_tokens=24, logprobs=0, **kw)
    a, b = plain.choices[0].logprobs.tokens, pen.choices[0].logprobs.tokens
    assert a != b
    assert distinct_ratio(b) > distinct_ratio(a), (a, b)
    # A penalty of the neutral value changes nothing.
    neutral = complete(client, prompt=prompt, max_tokens=24, **{field: 1.0 if field == "repetition_penalty" else 0.0})
    assert neutral.choices[0].text == plain.choices[0].text


# -- n > 1 ----------------------------------------------------------------------------------


def unique_prompt(tag, n_items=12):
    items = " ".join(f"Entry {i}: the {tag} value is {i * 7 % 13}." for i in range(n_items))
    return f"Record {tag}. {items} Summary:"


def test_n4_with_seed_shares_one_prefill(server, client):
    prompt = unique_prompt("n4-shared")
    before = server.metrics()
    r = complete(client, prompt=prompt, n=4, seed=1234, temperature=1.0, max_tokens=12)
    after = server.metrics()
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    texts = [c.text for c in r.choices]
    assert len(set(texts)) == 4, texts
    p = r.usage.prompt_tokens
    assert p > 4 * BLOCK
    details = r.usage.prompt_tokens_details.model_dump()
    assert details["cached_tokens"] == 0  # a fresh prompt: the leader's prefill is the only one
    # The three followers read every full block from the cache and compute only the tail.
    tail = p - (p - 1) // BLOCK * BLOCK
    assert details["prefilled_tokens"] == p + 3 * tail, details
    hits = metric(after, "agentkv_prefix_hit_tokens_total") - metric(before, "agentkv_prefix_hit_tokens_total")
    assert hits == 3 * ((p - 1) // BLOCK * BLOCK)
    # Same seed, same four choices; choice j is seed + j, so choice 0 equals n=1 with that seed.
    again = complete(client, prompt=prompt, n=4, seed=1234, temperature=1.0, max_tokens=12)
    assert [c.text for c in again.choices] == texts
    one = complete(client, prompt=prompt, seed=1235, temperature=1.0, max_tokens=12)
    assert one.choices[0].text == texts[1]


def test_n_streamed(client):
    prompt = unique_prompt("n-stream")
    whole = complete(client, prompt=prompt, n=3, seed=7, temperature=1.0, max_tokens=10)
    stream = complete(client, prompt=prompt, n=3, seed=7, temperature=1.0, max_tokens=10, stream=True,
                      stream_options={"include_usage": True})
    texts, finish = {}, {}
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.finish_reason is not None:
                finish[c.index] = c.finish_reason
    assert [texts[i] for i in range(3)] == [c.text for c in whole.choices]
    assert sorted(finish) == [0, 1, 2]
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_chat_n2(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Tell me a story."}],
                                       n=2, seed=3, temperature=1.0, max_tokens=10)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].message.content != r.choices[1].message.content


# -- lists of prompts -------------------------------------------------------------------------


def test_list_of_prompts_equals_one_by_one(client):
    prompts = ["Once upon a time", "The quick brown fox", "1, 2, 3,"]
    batch = complete(client, prompt=prompts, max_tokens=6)
    assert [c.index for c in batch.choices] == [0, 1, 2]
    singles = [complete(client, prompt=p, max_tokens=6) for p in prompts]
    assert [c.text for c in batch.choices] == [s.choices[0].text for s in singles]
    assert batch.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles)
    assert batch.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)


def test_list_of_token_lists_with_n_and_echo(server, client):
    tok = post(server, "/tokenize", {"model": MODEL, "prompt": "Hello there"})
    if tok[0] != 200:
        pytest.skip("no /tokenize")
    ids = tok[1]["tokens"]
    r = complete(client, prompt=[ids, ids[:2]], n=2, max_tokens=3, echo=True)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert r.choices[0].text.startswith("Hello there")
    assert r.choices[0].text == r.choices[1].text  # greedy: both choices of a prompt agree
    assert r.choices[2].text == r.choices[3].text


# -- echo with prompt logprobs ------------------------------------------------------------------


def test_echo_logprobs_score_the_prompt(client):
    prompt = "The capital of France is Paris"
    r = complete(client, prompt=prompt, max_tokens=2, echo=True, logprobs=20)
    lp = r.choices[0].logprobs
    p = r.usage.prompt_tokens
    assert len(lp.tokens) == p + r.usage.completion_tokens
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x is not None and x <= 0 for x in lp.token_logprobs[1:])
    assert lp.text_offset[0] == 0
    assert "".join(lp.tokens[:p]) == prompt
    # The last prompt token's score is what the model gives it after the rest of the prompt.
    head = complete(client, prompt="The capital of France is", max_tokens=1, logprobs=20)
    alternatives = head.choices[0].logprobs.top_logprobs[0]
    assert lp.tokens[p - 1] in alternatives
    assert lp.token_logprobs[p - 1] == pytest.approx(alternatives[lp.tokens[p - 1]], abs=1e-3)
    # A prompt-logprobs request reads no cache (cached tokens have no logits) but still fills it.
    again = complete(client, prompt=prompt, max_tokens=2, echo=True, logprobs=1)
    assert again.usage.prompt_tokens_details.cached_tokens == 0
    assert again.choices[0].logprobs.token_logprobs[1:p] == pytest.approx(lp.token_logprobs[1:p], abs=1e-3)


def test_echo_logprobs_streamed_equal_whole(client):
    prompt = "One, two, three, four,"
    whole = complete(client, prompt=prompt, max_tokens=4, echo=True, logprobs=2, n=2).choices
    stream = complete(client, prompt=prompt, max_tokens=4, echo=True, logprobs=2, n=2, stream=True)
    got = {0: ([], [], []), 1: ([], [], [])}
    text = {0: "", 1: ""}
    for chunk in stream:
        for c in chunk.choices:
            text[c.index] += c.text
            if c.logprobs is not None:
                got[c.index][0].extend(c.logprobs.tokens)
                got[c.index][1].extend(c.logprobs.token_logprobs)
                got[c.index][2].extend(c.logprobs.text_offset)
    for i in (0, 1):
        assert text[i] == whole[i].text
        assert got[i][0] == whole[i].logprobs.tokens
        assert got[i][1][0] is None
        assert got[i][1][1:] == pytest.approx(whole[i].logprobs.token_logprobs[1:], abs=1e-4)
        assert got[i][2] == whole[i].logprobs.text_offset


def test_llama_server_names(server, client):
    """repeat_penalty, n_predict and [[id, bias]] logit_bias, as llama-server's clients send them."""
    prompt = "one one one one one one one one"
    want = complete(client, prompt=prompt, max_tokens=6, repetition_penalty=1.8)
    status, got = post(server, "/v1/completions", {"model": MODEL, "prompt": prompt, "temperature": 0,
                                                   "n_predict": 6, "repeat_penalty": 1.8})
    assert status == 200, got
    assert got["choices"][0]["text"] == want.choices[0].text
    assert got["usage"]["completion_tokens"] == want.usage.completion_tokens
    forced = complete(client, max_tokens=3, logit_bias={"1000": 100})
    status, pairs = post(server, "/v1/completions", {"model": MODEL, "prompt": PROMPT, "temperature": 0,
                                                     "max_tokens": 3, "logit_bias": [[1000, 100]]})
    assert status == 200, pairs
    assert pairs["choices"][0]["text"] == forced.choices[0].text


def test_unknown_fields_are_ignored_as_vllm_does(server):
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 2, "temperature": 0, "best_of": 1, "user": "u",
            "min_tokens": 0, "skip_special_tokens": True, "some_future_field": {"x": [1, 2]}, "typical_p": 0.9}
    status, r = post(server, "/v1/completions", body)
    assert status == 200, r
    assert r["usage"]["kv_sharing"] == "none"  # the base under the default scheme
