// Splits generated text into content and tool calls as it arrives, in any
// ToolFormat. A call is released in pieces, as OpenAI streams it: its first
// delta names it (id, name, no arguments), later ones carry the arguments'
// text as the model writes it. A call whose head is not {"name": N,
// "arguments"|"parameters": is held whole until its object closes, then
// released in one delta; one that is not JSON stays text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/openai_guided.h"
#include "server/tool_format.h"

namespace agentkv::server {

struct ToolCallDelta {
  int index = 0;          // the call's place among the response's calls
  std::string id, name;   // set (never empty) on a call's first delta only
  std::string arguments;  // the next piece of the arguments' text
};

class ToolCallParser {
 public:
  // bare_triggers: text that begins a call without the format's trigger, the
  // call's own first text (a Hermes call the model writes as a bare JSON
  // object: {"name": "get_weather"); see tool_call_bare_triggers.
  explicit ToolCallParser(ToolFormat format = ToolFormat::kHermes, std::vector<std::string> bare_triggers = {});

  struct Out {
    std::string content;
    std::vector<ToolCallDelta> deltas;
    // flush only: the text of a call cut off after its deltas went out (a
    // whole response returns it as content instead).
    std::string unfinished;
  };
  Out push(std::string_view text);
  Out flush();  // at the end: whatever is held back
  int finished_calls() const { return finished_; }

 private:
  enum class State { kText, kOpen, kObject, kHeader, kArgs, kTail, kWhole, kAfter };
  bool step_text(Out& out);
  bool step_open(Out& out);
  bool step_object(Out& out);
  bool step_after();
  void scan(char c);  // the JSON nesting of the current object
  void step_char(char c, Out& out);
  void finish_call();
  void finish_whole(Out& out);
  void emit_args(Out& out, std::string text);

  ToolFormat format_;
  const ToolSyntax* syntax_;
  std::vector<std::string> bare_triggers_;
  State state_ = State::kText;
  std::string buf_;  // input not yet consumed
  std::string raw_;  // consumed since the section's trigger or the last finished call
  std::string obj_;  // the current call object's text
  std::string ws_;   // whitespace after the arguments, held until it is known to be inside them
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false, closed_ = false;
  int index_ = 0, finished_ = 0;
};

struct ParsedToolCalls {
  std::string content;
  std::vector<ToolCall> calls;
};
// Whole text: the finished calls, and the rest (an unfinished call included) as content.
ParsedToolCalls parse_tool_calls(ToolFormat format, std::string_view text,
                                 const std::vector<std::string>& bare_triggers = {});

// "call_" and 24 random hex digits; Mistral's nine letters and digits.
std::string new_tool_call_id(ToolFormat format = ToolFormat::kHermes);

}  // namespace agentkv::server
