"""Structured output and tool calls against `agentkv serve`, through the
official openai SDK: response_format json_schema (chat.completions.parse with a
Pydantic model), tool calls with tool_choice required and named, streamed and
not, a ReAct turn that feeds a tool's result back, the JSON-Schema-Test-Suite
and a corpus of realistic tool schemas validated with `jsonschema`, the
greedy-equality property of the mask, and the bad inputs that must be 400s.
SmolLM2-135M is weak: the tests assert the protocol and the grammar, not the
wisdom of the answers."""
import concurrent.futures
import json
from pathlib import Path

import pytest

from server_util import metric
from tool_defs import TIME, WEATHER

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")
pydantic = pytest.importorskip("pydantic")

MODEL = "agentkv-tools"
DATA = Path(__file__).resolve().parent / "data"
SUITE = Path("/usr/share/json-schema-test-suite/tests/draft4")


@pytest.fixture(scope="module")
def server(start_module_server):
    return start_module_server("--kv-cache-mb", 128, "--max-model-len", 4096, "--served-model-name", MODEL)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0, timeout=300)


def ask(text):
    return [{"role": "user", "content": text}]


def test_parse_with_pydantic(client):
    class Person(pydantic.BaseModel):
        name: str
        age: int
        employed: bool

    r = client.chat.completions.parse(model=MODEL, messages=ask("Describe a programmer as JSON."),
                                      response_format=Person, temperature=0, max_tokens=120)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "stop", msg.content
    assert isinstance(msg.parsed, Person)
    Person.model_validate_json(msg.content)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["required", "named"])
def test_tool_calls(client, stream, choice):
    tool_choice = "required" if choice == "required" else {"type": "function", "function": {"name": "get_time"}}
    kw = dict(model=MODEL, messages=ask("What is the weather in Paris, in Celsius?"), tools=[WEATHER, TIME],
              tool_choice=tool_choice, parallel_tool_calls=False, temperature=0, max_tokens=80)
    if stream:
        calls, reason = {}, None
        for chunk in client.chat.completions.create(stream=True, **kw):
            for c in chunk.choices:
                for d in c.delta.tool_calls or []:
                    slot = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                    slot["id"] = d.id or slot["id"]
                    slot["name"] += d.function.name or ""
                    slot["arguments"] += d.function.arguments or ""
                reason = c.finish_reason or reason
        calls = [calls[i] for i in sorted(calls)]
    else:
        r = client.chat.completions.create(**kw)
        reason = r.choices[0].finish_reason
        calls = [{"id": t.id, "name": t.function.name, "arguments": t.function.arguments}
                 for t in r.choices[0].message.tool_calls or []]
        assert r.choices[0].message.content is None
    assert reason == "tool_calls"
    assert len(calls) == 1
    call = calls[0]
    assert call["id"].startswith("call_")
    if choice == "named":
        assert call["name"] == "get_time"
    tool = {"get_weather": WEATHER, "get_time": TIME}[call["name"]]
    jsonschema.validate(json.loads(call["arguments"]), tool["function"]["parameters"])


def test_react_turn_feeds_the_result_back(client):
    """think -> tool call -> tool result -> answer, as an agent loop does it."""
    messages = ask("What is the weather in Paris? Use the tool, then answer.")
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER], tool_choice="required",
                                       parallel_tool_calls=False, temperature=0, max_tokens=80)
    call = r.choices[0].message.tool_calls[0]
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, WEATHER["function"]["parameters"])
    messages.append(r.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "clear"})})
    final = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER], tool_choice="none",
                                           temperature=0, max_tokens=40)
    assert final.choices[0].message.content
    assert not final.choices[0].message.tool_calls
    assert final.choices[0].finish_reason in ("stop", "length")


def test_auto_may_answer_in_text(client):
    r = client.chat.completions.create(model=MODEL, messages=ask("Say hello."), tools=[WEATHER], tool_choice="auto",
                                       temperature=0, max_tokens=20)
    c = r.choices[0]
    if c.message.tool_calls:  # a call, if made, is well formed
        assert c.finish_reason == "tool_calls"
        jsonschema.validate(json.loads(c.message.tool_calls[0].function.arguments), WEATHER["function"]["parameters"])
    else:
        assert c.message.content


def _generate(client, schema, temperature, seed=0):
    r = client.chat.completions.create(
        model=MODEL, messages=ask("Reply with a JSON value."), temperature=temperature, seed=seed, max_tokens=96,
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}})
    return r.choices[0]


def _check_corpus(client, schemas):
    """Every finished output validates; unsupported schemas are 400s. Returns counts."""
    counts = {"valid": 0, "length": 0, "unsupported": 0}

    def one(item):
        schema, temperature = item
        try:
            c = _generate(client, schema, temperature)
        except openai.BadRequestError as e:
            assert e.status_code == 400
            return "unsupported", None
        if c.finish_reason == "length":
            return "length", None
        instance = json.loads(c.message.content)
        jsonschema.validate(instance, schema, cls=jsonschema.Draft4Validator if "$schema" not in schema else None)
        return "valid", instance

    items = [(s, t) for s in schemas for t in (0.0, 1.0)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for kind, _ in pool.map(one, items):
            counts[kind] += 1
    return counts


def test_tool_schema_corpus_validates(client):
    tools = json.loads((DATA / "tool_schemas.json").read_text())
    assert len(tools) >= 30
    counts = _check_corpus(client, [t["function"]["parameters"] for t in tools])
    print("tool schema corpus:", counts)
    assert counts["valid"] >= len(tools)  # most finish within 96 tokens; every finished one validated


@pytest.mark.skipif(not SUITE.is_dir(), reason="Debian's json-schema-test-suite is not installed")
def test_json_schema_test_suite(client):
    schemas = []
    for f in sorted(SUITE.glob("*.json")):
        if f.name in ("refRemote.json",):  # needs a remote server
            continue
        schemas += [g["schema"] for g in json.loads(f.read_text())]
    counts = _check_corpus(client, schemas)
    print("JSON-Schema-Test-Suite draft4:", len(schemas), "schemas x 2 temperatures:", counts)
    # Every finished output validated (_check_corpus); measured 2026-11-26: 46 valid, 40 cut at
    # max_tokens, 68 refused of 154. The floor catches a regression that refuses everything.
    assert counts["valid"] >= 30


def test_mask_keeps_the_greedy_answer(client):
    """Constrained greedy output equals the unconstrained one when that already satisfies the grammar."""
    kw = dict(model=MODEL, messages=ask("List three colours."), temperature=0, max_tokens=24)
    free = client.chat.completions.create(**kw).choices[0]
    for extra in ({"guided_regex": "[\\s\\S]*"}, {"guided_choice": [free.message.content, "zzz"]}):
        constrained = client.chat.completions.create(extra_body=extra, **kw).choices[0]
        assert constrained.message.content == free.message.content, extra


@pytest.mark.parametrize("body,param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
     "response_format"),
    ({"guided_json": "{not json"}, "guided_json"),
    ({"guided_json": {"type": "string", "description": "x" * (300 << 10)}}, "guided_json"),
    ({"guided_json": "[" * 1000 + "]" * 1000}, "guided_json"),  # as a string: past the body's own depth check
    ({"guided_regex": "(a{100}){100}"}, "guided_regex"),
    ({"guided_regex": "(unclosed"}, "guided_regex"),
    ({"guided_grammar": "root ::= missing"}, "guided_grammar"),
    ({"guided_json": {"type": "array", "uniqueItems": True}}, "guided_json"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice.function.name"),
    ({"tool_choice": "required"}, "tool_choice"),
])
def test_bad_input_is_a_400(server, body, param):
    status, data = server.post_json("/v1/chat/completions", {"model": MODEL, "messages": ask("hi"), "max_tokens": 4, **body})
    assert status == 400, data
    err = json.loads(data)["error"]
    assert err["param"] == param, err
    assert err["message"]
    status, _ = server.post_json("/v1/chat/completions", {"model": MODEL, "messages": ask("hi"), "max_tokens": 2})
    assert status == 200  # and the server keeps serving


def test_deep_json_body_is_a_400(server):
    body = '{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "guided_json": %s}' % (
        MODEL, "[" * 1000 + "]" * 1000)
    status, _, data = server.request("POST", "/v1/chat/completions", body.encode())
    assert status == 400, data


def test_grammar_metrics(server, client):
    schema = {"type": "object", "properties": {"k": {"type": "integer"}}, "required": ["k"]}
    for _ in range(2):
        _generate(client, schema, 0)
    samples = server.metrics()
    assert metric(samples, "agentkv_grammar_cache_hits_total") >= 1
    assert metric(samples, "agentkv_grammar_compilations_total") >= 1
    assert metric(samples, "agentkv_grammar_compile_seconds_total") > 0
