// Tools in the prompt and the grammar of calls, in each ToolFormat
// (tool_format.h):
//
//   hermes   the system turn lists the tools as JSON lines inside
//            <tools></tools>; a call is <tool_call>\n{"name": N,
//            "arguments": {...}}\n</tool_call>; a result is a user turn
//            <tool_response>\n...\n</tool_response>.
//   llama3   "Environment: ipython" in the system turn, the tools (JSON,
//            indented) at the head of the first user turn; a call is the
//            turn {"name": N, "parameters": {...}}; a result is an
//            "ipython" turn.
//   mistral  [AVAILABLE_TOOLS] [...][/AVAILABLE_TOOLS] before the last user
//            turn; calls are [TOOL_CALLS] [{"name": N, "arguments": {...},
//            "id": ID}, ...]; a result is [TOOL_RESULTS] {"content": ...,
//            "call_id": ID}[/TOOL_RESULTS].
//
// The structure (where tools go, roles, call syntax) is each family's
// template's; the sentence that introduces the tools is agentkv's.
// Parsing calls out of the output: tool_call_parser.h. docs/usage.md,
// "Tool calls".
#pragma once

#include <optional>
#include <vector>

#include "grammar/grammar_spec.h"
#include "server/openai_guided.h"
#include "server/openai_request.h"
#include "server/tool_format.h"
#include "tokenizer/chat_template.h"

namespace agentkv::server {

// The conversation as (role, content) turns for a template that does not
// render tools (a built-in, or a Jinja one without `tools`): tools,
// calls and results rendered in `format`. Without tools and calls the
// messages pass unchanged (developer becomes system).
std::vector<agentkv::ChatMessage> render_tool_conversation(ToolFormat format,
                                                           const std::vector<ChatMessage>& msgs,
                                                           const std::vector<ToolDef>& tools);

// The conversation and tools as a Jinja template reads them
// (ChatRenderer::render): OpenAI's message shape, with each call's arguments
// as a JSON object, as vLLM and Hugging Face pass them (arguments that are
// not a JSON object stay a string); developer becomes system. tools: "" when
// there are none.
std::string template_messages_json(const std::vector<ChatMessage>& msgs);
std::string template_tools_json(const std::vector<ToolDef>& tools);

// The grammar of tool_choice required / named (only calls, one or more as
// parallel_tool_calls says) or auto (free text; a call once its trigger is
// written). nullopt for none.
// bare: with tool_choice auto in the Hermes format, a call may also begin
// as a bare JSON object that names a tool, {"name": "get_weather", as
// Qwen2.5-Coder writes them, without <tool_call>: once the model has written
// that much, the rest of the call is constrained like a tagged one.
std::optional<GrammarSpec> tool_call_grammar(ToolFormat format, const GuidedFields& g, bool bare = false);

// The text that begins such a bare call, two per offered tool, compact and
// pretty-printed ({\n  "name": "get_weather"), empty unless bare, Hermes and
// auto: for ToolCallParser.
std::vector<std::string> tool_call_bare_triggers(ToolFormat format, const GuidedFields& g, bool bare);

}  // namespace agentkv::server
