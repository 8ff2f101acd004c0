"""Tool calls in each model family's own format (--tool-format hermes, llama3,
mistral), through the openai SDK against `agentkv serve`: the call is
constrained and parsed in that format, streamed as argument fragments that add
up to the whole response's arguments, and a history with the call and its
result renders and runs. SmolLM2 is served here under each family's chat
template (--chat-template), so what is tested is the protocol, not a Llama or
Mistral model's skill."""
import json

import pytest

from tool_defs import TIME, WEATHER

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

MODEL = "agentkv-formats"
TEMPLATE = {"hermes": "chatml", "llama3": "llama3", "mistral": "mistral"}


@pytest.fixture(scope="module", params=["hermes", "llama3", "mistral"])
def fmt_client(request, start_module_server):
    fmt = request.param
    server = start_module_server("--kv-cache-mb", 64, "--max-model-len", 2048, "--served-model-name", MODEL,
                                 "--chat-template", TEMPLATE[fmt], "--tool-format", fmt)
    return fmt, openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0, timeout=300)


def call_kw(tool_choice):
    return dict(model=MODEL, messages=[{"role": "user", "content": "What is the weather in Paris, in Celsius?"}],
                tools=[WEATHER, TIME], tool_choice=tool_choice, parallel_tool_calls=False, temperature=0,
                max_tokens=80)


def streamed(client, **kw):
    """The calls as the OpenAI SDK's users assemble them, and the number of argument pieces."""
    calls, pieces, reason = {}, 0, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            for d in c.delta.tool_calls or []:
                if d.id:  # the first delta of a call names it
                    assert d.index not in calls
                    calls[d.index] = {"id": d.id, "name": d.function.name, "arguments": d.function.arguments or ""}
                else:
                    assert d.function.name is None
                    calls[d.index]["arguments"] += d.function.arguments
                    pieces += 1
            reason = c.finish_reason or reason
    return [calls[i] for i in sorted(calls)], pieces, reason


@pytest.mark.parametrize("choice", ["required", "named"])
def test_call_in_the_format_streamed_in_pieces(fmt_client, choice):
    fmt, client = fmt_client
    tool_choice = "required" if choice == "required" else {"type": "function", "function": {"name": "get_time"}}
    r = client.chat.completions.create(**call_kw(tool_choice))
    assert r.choices[0].finish_reason == "tool_calls", r.choices[0].message
    assert r.choices[0].message.content is None
    whole = [{"id": t.id, "name": t.function.name, "arguments": t.function.arguments}
             for t in r.choices[0].message.tool_calls]
    assert len(whole) == 1
    if choice == "named":
        assert whole[0]["name"] == "get_time"
    tool = {"get_weather": WEATHER, "get_time": TIME}[whole[0]["name"]]
    jsonschema.validate(json.loads(whole[0]["arguments"]), tool["function"]["parameters"])
    assert len(whole[0]["id"]) == (9 if fmt == "mistral" else 29)

    calls, pieces, reason = streamed(client, **call_kw(tool_choice))
    assert reason == "tool_calls"
    assert [(c["name"], c["arguments"]) for c in calls] == [(c["name"], c["arguments"]) for c in whole]
    assert pieces > 1, "the arguments came whole, not in pieces"


def test_history_with_the_call_and_its_result(fmt_client):
    """think -> call -> result -> answer: the assistant's call and the tool's
    result are rendered in the format and the server answers."""
    _, client = fmt_client
    kw = call_kw("required")
    r = client.chat.completions.create(**kw)
    call = r.choices[0].message.tool_calls[0]
    messages = kw["messages"] + [r.choices[0].message.model_dump(exclude_none=True),
                                 {"role": "tool", "tool_call_id": call.id, "content": "18 C, clear"}]
    final = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER, TIME], tool_choice="auto",
                                           temperature=0, max_tokens=30)
    c = final.choices[0]
    # The call and the result are in the prompt. (The answer may be empty:
    # Mistral's call ids are random, so the prompt, and SmolLM2's greedy
    # answer to it, change from run to run.)
    assert final.usage.prompt_tokens > r.usage.prompt_tokens + 10
    assert c.finish_reason in ("stop", "length", "tool_calls")
    if c.message.tool_calls:  # a call, if made, is well formed
        json.loads(c.message.tool_calls[0].function.arguments)
    # The same history with a second round forced into a call works too.
    again = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER, TIME],
                                           tool_choice="required", parallel_tool_calls=False, temperature=0,
                                           max_tokens=80)
    assert again.choices[0].finish_reason == "tool_calls"
