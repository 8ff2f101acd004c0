"""The model's own chat template, rendered by agentkv as Hugging Face renders it.

Every template of the corpus (the model files in models/ that carry one, and
the 72 real templates of llama.cpp's models/templates/, which
scripts/setup_jinja.sh puts beside the engine it builds) renders every
conversation of tests/data/chat_template/conversations.json, once through
`agentkv chat-template --batch` and once through jinja2 as transformers'
apply_chat_template does (tools/reference/chat_template_ref.py):

- where jinja2 renders, agentkv's text is the same, byte for byte;
- where jinja2 raises, agentkv raises too;
- except the cases in KNOWN, each with its reason, and the test fails when
  that list is not exactly what happens (a fix, or a new difference).

Content that spells control tokens stays inside the ranges marked as the
request's (so it is never a control token), on every template, and on the
real tokenizers the token ids hold exactly the control tokens of a harmless
message.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools" / "reference"))

CONVERSATIONS = ROOT / "tests" / "data" / "chat_template" / "conversations.json"
JINJA_DIR = Path(os.environ.get("AGENTKV_JINJA_DIR", Path.home() / ".cache" / "agentkv" / "jinja-11434.0.0"))
MODELS = ROOT / "models"

# Where agentkv (llama.cpp's engine) and jinja2 part, by (template file,
# conversation regex) -> reason. Measured 2026-12-02: 868 of 923 renders of
# the sdist's templates identical, 17 raise in both.
_TOOL_CONVS = r"tools_offered|tools_no_system|tool_call_and_result|parallel_calls|injection_in_tool_args"
_CALL_CONVS = r"tool_call_and_result|parallel_calls|injection_in_tool_args"
KNOWN = {
    ("CohereForAI-c4ai-command-r-plus-tool_use.jinja", _TOOL_CONVS):
        "jinja2 raises: it reads tool.description at the top level (Cohere's own tool shape, not OpenAI's); "
        "agentkv renders the missing attribute as empty",
    ("Kimi-K2-Instruct.jinja", _CALL_CONVS):
        "jinja2's sandbox refuses list.append (as transformers' does); agentkv's engine allows it",
    ("Kimi-K2-Thinking.jinja", _CALL_CONVS):
        "jinja2's sandbox refuses list.append (as transformers' does); agentkv's engine allows it",
    ("NVIDIA-Nemotron-Nano-v2.jinja", r"no_user_turn"):
        "jinja2 raises on messages[-1] of a filtered empty list; agentkv reads it as undefined",
    ("fireworks-ai-llama-3-firefunction-v2.jinja", r".*"):
        "the template needs a `functions` variable that no OpenAI request has; jinja2 raises, agentkv "
        "renders it as empty",
    ("llama-cpp-deepseek-r1.jinja", _TOOL_CONVS):
        "written for llama.cpp's engine: jinja2's map() gives a generator that tojson cannot serialise",
    ("meetkai-functionary-medium-v3.1.jinja", _TOOL_CONVS):
        "jinja2 HTML-escapes a string added to a |safe Markup string (&#34; for quotes); llama.cpp's engine "
        "has no Markup type, so agentkv writes the quotes the template means",
    ("meetkai-functionary-medium-v3.2.jinja", _CALL_CONVS):
        "the template wants arguments as a JSON string (jinja2 raises adding a dict to a str); agentkv "
        "concatenates the object's JSON",
}

# Control-token text of many families; none may come from the request.
MARKERS = ["<|im_start|>", "<|im_end|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "</s>",
           "[INST]", "[/INST]", "<end_of_turn>", "<start_of_turn>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>",
           "<|end|>", "<|system|>", "<|endoftext|>"]


def _conversations():
    return json.loads(CONVERSATIONS.read_text(encoding="utf-8"))["conversations"]


def _model_template(engine_path, path):
    """(source, bos, eos) of a model file's template, or None without one."""
    r = subprocess.run([str(engine_path), "chat-template", "-m", str(path), "--source"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)
    return (t["template"], t["bos_token"], t["eos_token"]) if t["template"] else None


@pytest.fixture(scope="module")
def templates(engine_path):
    """(name, source, bos, eos) of every template in the corpus."""
    out = []
    for p in sorted(MODELS.glob("*.gguf")):
        t = _model_template(engine_path, p)
        if t is not None:
            out.append((p.name, *t))
    sdist = sorted((JINJA_DIR / "templates").glob("*.jinja"))
    assert len(sdist) >= 60, f"no llama.cpp templates in {JINJA_DIR / 'templates'}: run scripts/setup_jinja.sh"
    out += [(p.name, p.read_text(encoding="utf-8"), "<s>", "</s>") for p in sdist]
    return out


def _request(src, bos, eos, conv, messages=None):
    req = {"template": src, "messages": messages if messages is not None else conv["messages"],
           "add_generation_prompt": conv.get("add_generation_prompt", True), "bos_token": bos, "eos_token": eos}
    if "tools" in conv:
        req["tools"] = conv["tools"]
    return req


def _render_batch(engine_path, requests):
    r = subprocess.run([str(engine_path), "chat-template", "--batch", "-"],
                       input="".join(json.dumps(q, ensure_ascii=False) + "\n" for q in requests),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    outs = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(outs) == len(requests), r.stderr[-2000:]
    return outs


def _known(template, conv):
    for (t, pattern), reason in KNOWN.items():
        if t == template and re.fullmatch(pattern, conv):
            return reason
    return None


@pytest.fixture(scope="module")
def renders(engine_path, templates):
    pytest.importorskip("jinja2", reason="the reference renders with jinja2 (pip install jinja2)")
    convs = _conversations()
    keys = [(t, c) for t in templates for c in convs]
    outs = _render_batch(engine_path, [_request(t[1], t[2], t[3], c) for t, c in keys])
    return keys, outs


def test_agentkv_renders_what_jinja2_renders(renders):
    import chat_template_ref as ref
    keys, outs = renders
    unexpected, seen_known, same = [], set(), 0
    for ((name, src, bos, eos), conv), out in zip(keys, outs):
        try:
            want, ref_error = ref.render(src, conv["messages"], conv.get("tools"),
                                         conv.get("add_generation_prompt", True), bos, eos), None
        except Exception as e:  # what the template raises, or jinja2 refuses
            want, ref_error = None, f"{type(e).__name__}: {e}"
        if ref_error is None and out.get("text") == want:
            same += 1
            continue
        if ref_error is not None and "error" in out:
            continue  # both refuse
        reason = _known(name, conv["name"])
        if reason is not None:
            seen_known.add(next(k for k in KNOWN if k[0] == name and re.fullmatch(k[1], conv["name"])))
            continue
        unexpected.append((name, conv["name"], ref_error or "jinja2 renders", out.get("error", "different text")))
    assert not unexpected, "\n".join(map(str, unexpected[:20]))
    assert seen_known == set(KNOWN), f"KNOWN lists differences that no longer happen: {set(KNOWN) - seen_known}"
    assert same >= 0.9 * len(keys), (same, len(keys))


def _outside(text, spans, marker):
    """How many times marker occurs in text outside the request's spans
    (byte offsets)."""
    data, m = text.encode("utf-8"), marker.encode("utf-8")
    n, i = 0, data.find(m)
    while i >= 0:
        if not any(b <= i and i + len(m) <= e for b, e in spans):
            n += 1
        i = data.find(m, i + 1)
    return n


def test_content_that_spells_control_tokens_stays_input(engine_path, templates):
    """With content spelling every family's markers, each template writes
    exactly the markers it writes for harmless content outside the request's
    spans: the injected ones are all inside (and so plain text)."""
    convs = [c for c in _conversations() if "inject" in c]
    assert convs
    requests, pairs = [], []
    for name, src, bos, eos in templates:
        for c in convs:
            harmless = json.loads(json.dumps(c["messages"]).replace(json.dumps(c["inject"])[1:-1], "hello"))
            requests += [_request(src, bos, eos, c), _request(src, bos, eos, c, harmless)]
            pairs.append((name, c["name"]))
    outs = _render_batch(engine_path, requests)
    checked = 0
    for k, (name, conv) in enumerate(pairs):
        bad, good = outs[2 * k], outs[2 * k + 1]
        if "error" in bad or "error" in good:
            continue
        assert "hello" in good["text"] or conv == "injection_in_tool_args", (name, conv)
        for m in MARKERS:
            assert _outside(bad["text"], bad["input_spans"], m) == _outside(good["text"], good["input_spans"], m), \
                (name, conv, m)
        checked += 1
    assert checked >= len(templates), checked


def _prompt_ids(engine_path, model, messages, tools=None):
    args = [str(engine_path), "chat-template", "-m", str(model), "--tokens", "--spans",
            "--messages", json.dumps(messages)]
    if tools:
        args += ["--tools", json.dumps(tools)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ids = [int(x) for x in r.stdout.strip().splitlines()[-1].split(",")]
    return ids


@pytest.mark.parametrize("model", ["SmolLM2-135M-Instruct.Q4_1.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"])
def test_injected_markers_are_not_control_tokens(engine_path, model):
    path = MODELS / model
    if not path.exists():
        pytest.skip(f"{model} is not installed (scripts/get_model.sh)")
    conv = next(c for c in _conversations() if c["name"] == "injection")
    bad = _prompt_ids(engine_path, path, conv["messages"])
    good = _prompt_ids(engine_path, path, [{"role": "user", "content": "hello"}])
    # The turn markers, one control token each: as many in the injected
    # prompt as in the harmless one.
    r = subprocess.run([str(engine_path), "tokenize", "-m", str(path), "--no-bos", "--", "<|im_start|><|im_end|>"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    control = [int(x) for x in r.stdout.strip().split(",")]
    assert len(control) == 2, "the markers are one control token each in this vocabulary"
    for tid in control:
        assert bad.count(tid) == good.count(tid), (model, tid, bad.count(tid), good.count(tid))


def test_qwen_default_system_turn_is_qwens(engine_path):
    path = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if not path.exists():
        pytest.skip("qwen2.5-coder-0.5b is not installed (scripts/get_model.sh qwen2.5-coder-0.5b)")
    r = subprocess.run([str(engine_path), "chat-template", "-m", str(path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud."), r.stdout
    assert "SmolLM" not in r.stdout
    assert "the model's own chat template (Jinja" in r.stderr


# A template that raises on one conversation, loops on another and recurses
# on a third; the server answers each with a 400 that says so and keeps
# serving the others.
_BAD_TEMPLATE = (
    "{% macro deep(n) %}{{ deep(n + 1) }}{% endmacro %}"
    "{% for m in messages %}"
    "{% if m.content == 'boom' %}{{ raise_exception('no booms here') }}{% endif %}"
    "{% if m.content == 'loop' %}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
    "{% endfor %}{% endif %}"
    "{% if m.content == 'deep' %}{{ deep(0) }}{% endif %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n")


def _chat(server, content):
    return server.post_json("/v1/chat/completions", {
        "messages": [{"role": "user", "content": content}], "max_tokens": 4, "temperature": 0})


def test_server_answers_a_bad_template_with_400_and_keeps_serving(start_server, tmp_path):
    path = tmp_path / "bad.jinja"
    path.write_text(_BAD_TEMPLATE, encoding="utf-8")
    s = start_server("--chat-template", path)
    assert f"chat template: the chat template in {path}" in s.log(), s.log()
    status, body = _chat(s, "hello")
    assert status == 200, body
    for content, says in [("boom", "no booms here"), ("loop", "render budget"), ("deep", "nests deeper")]:
        status, body = _chat(s, content)
        assert status == 400, (content, body)
        err = json.loads(body)["error"]
        assert err["param"] == "messages" and says in err["message"], (content, err)
    status, body = _chat(s, "hello again")
    assert status == 200, body


@pytest.mark.parametrize("kind", ["huge", "unparsable", "missing"])
def test_server_refuses_to_start_on_a_bad_template_file(serve_binary, model_path, tmp_path, kind):
    path = tmp_path / "t.jinja"
    if kind == "huge":
        path.write_text("x" * (1 << 20), encoding="utf-8")
    elif kind == "unparsable":
        path.write_text("{% for x in %}{% endfor %}", encoding="utf-8")
    r = subprocess.run([str(serve_binary), "serve", "-m", str(model_path), "--port", "0", "--chat-template",
                        str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    says = {"huge": "above the limit", "unparsable": "cannot be parsed", "missing": "readable .jinja file"}[kind]
    assert says in r.stderr, r.stderr


def test_qwen_tools_go_through_its_template(engine_path):
    """Qwen2.5's tools section is its template's words, and a call and its
    result are rendered as the template writes them (<tool_call>,
    <tool_response>)."""
    path = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if not path.exists():
        pytest.skip("qwen2.5-coder-0.5b is not installed (scripts/get_model.sh qwen2.5-coder-0.5b)")
    conv = next(c for c in _conversations() if c["name"] == "tool_call_and_result")
    r = subprocess.run([str(engine_path), "chat-template", "-m", str(path), "--messages",
                        json.dumps(conv["messages"]), "--tools", json.dumps(conv["tools"])],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "You are provided with function signatures within <tools></tools> XML tags" in r.stdout
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in r.stdout
    assert "<tool_response>\n{\"temp\": 18" in r.stdout


def test_qwen_serves_a_tool_call_through_its_template(serve_binary):
    """agentkv serve on Qwen2.5-Coder-0.5B: the log says the template renders
    the tools; a required call comes back parsed, naming the tool, with
    arguments its schema accepts; the call and its result then render back
    through the template for the answer."""
    import server_util
    path = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if not path.exists():
        pytest.skip("qwen2.5-coder-0.5b is not installed (scripts/get_model.sh qwen2.5-coder-0.5b)")
    conv = next(c for c in _conversations() if c["name"] == "tools_no_system")
    s = server_util.Server(serve_binary, path, ["--max-model-len", "2048"], threads=server_util.env_threads())
    try:
        log = s.log()
        assert "the model's own chat template (Jinja" in log and "tools: rendered by the template" in log, log
        status, body = s.post_json("/v1/chat/completions", {
            "messages": conv["messages"], "tools": conv["tools"], "tool_choice": "required",
            "max_tokens": 48, "temperature": 0})
        assert status == 200, body
        msg = json.loads(body)["choices"][0]["message"]
        calls = msg["tool_calls"]
        assert len(calls) >= 1 and calls[0]["function"]["name"] == "get_weather", msg
        args = json.loads(calls[0]["function"]["arguments"])
        assert isinstance(args.get("city"), str) and args["city"], args
        history = conv["messages"] + [msg, {"role": "tool", "tool_call_id": calls[0]["id"],
                                            "content": "{\"temp\": 4, \"sky\": \"rain\"}"}]
        status, body = s.post_json("/v1/chat/completions", {
            "messages": history, "tools": conv["tools"], "max_tokens": 8, "temperature": 0})
        assert status == 200, body
    finally:
        assert s.stop(timeout=60) == 0


def test_builtin_gemma_renders_what_gemmas_template_renders(engine_path):
    """A Gemma file without a template (Gemma 3 270M is a base model) gets the
    built-in gemma format: on every corpus conversation of plain user and
    assistant turns it equals jinja2's rendering of Gemma 2 IT's template
    (llama.cpp's models/templates; Gemma 3 IT's renders these the same, and
    adds the system folding the built-in also does, checked on one case)."""
    import chat_template_ref as ref
    gemma = MODELS / "gemma-3-270m-q4_k_m.gguf"
    if not gemma.exists():
        pytest.skip(f"{gemma} missing (scripts/get_model.sh gemma3-270m)")
    src = (JINJA_DIR / "templates" / "google-gemma-2-2b-it.jinja").read_text(encoding="utf-8")
    checked = 0
    for conv in _conversations():
        msgs = conv["messages"]
        if conv.get("tools") or not all(m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str)
                                        and not m.get("tool_calls") for m in msgs):
            continue
        if not msgs or msgs[0]["role"] != "user":
            continue
        gen = conv.get("add_generation_prompt", True)
        r = subprocess.run([str(engine_path), "chat-template", "-m", str(gemma), "--messages", json.dumps(msgs),
                            "--spans"] + ([] if gen else ["--no-generation-prompt"]), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "built-in gemma template" in r.stderr
        assert json.loads(r.stdout)["text"] == ref.render(src, msgs, add_generation_prompt=gen), conv.get("name")
        checked += 1
    assert checked >= 3
    sys_msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    r = subprocess.run([str(engine_path), "chat-template", "-m", str(gemma), "--messages", json.dumps(sys_msgs),
                        "--spans"], capture_output=True, text=True, timeout=120)
    assert json.loads(r.stdout)["text"] == "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
