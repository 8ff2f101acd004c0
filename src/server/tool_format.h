// How a model family writes tool calls, and which one a server uses.
//
//   hermes   <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, one
//            block per call; results in <tool_response> user turns (Qwen2.5,
//            Hermes; agentkv's generic format for templates without tools)
//   llama3   {"name": N, "parameters": {...}} as the whole turn, calls joined
//            by "; "; results in "ipython" turns (Llama 3.1-3.3's JSON tool
//            calling)
//   mistral  [TOOL_CALLS] [{"name": N, "arguments": {...}}, ...]; results in
//            [TOOL_RESULTS] blocks, tools in [AVAILABLE_TOOLS] (Mistral's v3
//            tokenizer, 7B-Instruct v0.3 and later)
//
// docs/usage.md, "Tool calls".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"
#include "util/status.h"

namespace agentkv::server {

enum class ToolFormat { kHermes, kLlama3, kMistral };

// The family's own format when the GGUF's template renders tools in it (a
// Llama-3 template that knows "ipython", a Mistral one with [TOOL_CALLS], a
// ChatML one with <tool_call>); otherwise the generic Hermes format.
ToolFormat tool_format_detect(std::string_view jinja, ChatTemplateKind kind);
// Whether a Jinja template teaches calls in `f` when it renders tools (its
// source writes the format's marker: <tool_call>, ipython, [TOOL_CALLS]), so
// that the template, not agentkv's wording, may render them.
bool tool_format_taught_by(std::string_view jinja, ToolFormat f);
// "hermes", "llama3" or "mistral".
Result<ToolFormat> tool_format_from_name(std::string_view name);
const char* tool_format_name(ToolFormat f);

// The text around calls, as the model writes them and the grammar enforces.
struct ToolSyntax {
  std::vector<std::string> triggers;  // text that opens a call section (not part of the call)
  std::string call_trigger;           // or the call's own first text: llama3's {"name":
  std::string section_open;           // after the trigger, before the first call: mistral's "["
  std::string args_key;               // "arguments" | "parameters" (either is read)
  std::string call_close;             // after a call's object: hermes' "</tool_call>"
  std::string separator;              // between calls of one section: "; " (llama3), ", " (mistral)
  std::string section_close;          // after the last call: mistral's "]"
};
const ToolSyntax& tool_syntax(ToolFormat f);

}  // namespace agentkv::server
