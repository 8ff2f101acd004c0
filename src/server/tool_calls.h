// Tool calls in the Hermes format (Qwen2.5 and Hermes models use it; it is
// also agentkv's generic rendering for templates that have no tools
// rendering of their own, SmolLM2's among them):
//
//   the system turn lists the tools as JSON lines inside <tools></tools>;
//   a call is   <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
//   a result is a user turn <tool_response>\n...\n</tool_response>.
//
// Rendering the history, the grammar that forces or permits calls (an
// xgrammar structural tag), and parsing the calls out of the generated text,
// whole or as it streams. docs/usage.md, "Tool calls".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "grammar/grammar_spec.h"
#include "server/openai_guided.h"
#include "server/openai_request.h"
#include "tokenizer/chat_template.h"

namespace agentkv::server {

inline constexpr const char* kToolCallBegin = "<tool_call>";
inline constexpr const char* kToolCallEnd = "</tool_call>";

// The conversation as plain (role, content) turns for chat_template_apply:
// tools in the system turn, assistant calls in their content, tool results
// as user turns (consecutive ones merged). Without tools and calls the
// messages pass unchanged (developer becomes system).
std::vector<agentkv::ChatMessage> render_tool_conversation(const std::vector<ChatMessage>& msgs,
                                                           const std::vector<ToolDef>& tools);

// The grammar of tool_choice required / named (only calls, one or more as
// parallel_tool_calls says) or auto (free text; a call once <tool_call>
// begins). nullopt for none.
std::optional<GrammarSpec> tool_call_grammar(const GuidedFields& g);

// "call_" and 24 random hex digits.
std::string new_tool_call_id();

// Splits generated text into content and calls, as it arrives. Content is
// released except for a tail that may begin <tool_call>; a call is released
// when its </tool_call> arrives. An unparsable or unfinished call stays text.
class ToolCallParser {
 public:
  struct Out {
    std::string content;
    std::vector<ToolCall> calls;
  };
  Out push(const std::string& text);
  Out flush();  // at the end: whatever is held back, as content

 private:
  std::string buf_;
  bool in_call_ = false;
};

}  // namespace agentkv::server
