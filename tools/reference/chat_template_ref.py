"""Chat templates rendered the way Hugging Face's apply_chat_template renders
them (transformers' chat_template_utils): jinja2's ImmutableSandboxedEnvironment
with trim_blocks, lstrip_blocks and loop controls; tojson as json.dumps with
ensure_ascii=False; raise_exception and strftime_now as globals; `{% generation
%}` blocks render their body. The reference for agentkv's renderer
(tests/python/test_chat_template.py).

    python tools/reference/chat_template_ref.py TEMPLATE.jinja MESSAGES.json
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class _Generation(Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers'
    AssistantTracker, without the mask it records)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def render(source, messages, tools=None, add_generation_prompt=True, bos_token="", eos_token=""):
    """The rendered text; raises what the template raises."""
    template = environment().from_string(source)
    kwargs = {"messages": messages, "add_generation_prompt": add_generation_prompt,
              "bos_token": bos_token, "eos_token": eos_token}
    if tools is not None:
        kwargs["tools"] = tools
    return template.render(**kwargs)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help") else 2)
    with open(sys.argv[1], encoding="utf-8") as f:
        src = f.read()
    with open(sys.argv[2], encoding="utf-8") as f:
        msgs = json.load(f)
    sys.stdout.write(render(src, msgs))
