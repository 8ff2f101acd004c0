"""An agent framework from PyPI against `agentkv serve`: the OpenAI Agents SDK
(openai-agents), chosen because it is the OpenAI SDK's own agent loop (the
client our users already run) and drives tools through chat completions with
no framework-specific server features. A two-tool task runs end to end.
SmolLM2-135M is weak, so the test asserts the protocol: each tool is called
with arguments valid under its schema, the results are fed back, and an
answer comes; not the wisdom of the answer."""
import asyncio
import json

import pytest

agents = pytest.importorskip("agents")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

MODEL = "agentkv-agents"


@pytest.fixture(scope="module")
def server(start_module_server):
    return start_module_server("--kv-cache-mb", 96, "--max-model-len", 4096, "--served-model-name", MODEL)


def test_openai_agents_two_tool_task(server):
    calls = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        calls.append(("get_weather", {"city": city}))
        return json.dumps({"city": city, "temperature_c": 18, "sky": "clear"})

    @agents.function_tool
    def get_time(city: str) -> str:
        """The local time in a city."""
        calls.append(("get_time", {"city": city}))
        return json.dumps({"city": city, "time": "14:05"})

    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="none", max_retries=0, timeout=300)
    model = agents.OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    agents.set_tracing_disabled(True)

    def agent_for(tool):
        # tool_choice required on the first turn; the SDK resets it to auto
        # after a call (reset_tool_choice), so the model may then answer.
        return agents.Agent(name="assistant", instructions="Use the tool, then answer in one sentence.",
                            model=model, tools=[tool],
                            model_settings=agents.ModelSettings(tool_choice="required", temperature=0,
                                                                max_tokens=64, parallel_tool_calls=False))

    async def run_both():
        first = await agents.Runner.run(agent_for(get_weather), "What is the weather in Paris?", max_turns=6)
        second = await agents.Runner.run(agent_for(get_time),
                                         first.to_input_list() + [{"role": "user", "content": "And the time there?"}],
                                         max_turns=6)
        return first, second

    first, second = asyncio.run(run_both())  # temperature 0 on a batch-invariant engine: deterministic
    print("calls:", calls, "final:", second.final_output)
    names = [n for n, _ in calls]
    assert "get_weather" in names and "get_time" in names, calls
    for _, args in calls:
        jsonschema.validate(args, {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
    # The results went back to the model (tool outputs in the history) and an answer came.
    for run in (first, second):
        items = [i.type for i in run.new_items]
        assert "tool_call_output_item" in items
        assert isinstance(run.final_output, str) and run.final_output
