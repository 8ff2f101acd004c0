#include "server/tool_calls.h"

#include <nlohmann/json.hpp>

namespace agentkv::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;  // keeps the schemas' property order

ojson tool_json(const ToolDef& t) {
  ojson fn = {{"name", t.name}};
  if (!t.description.empty()) fn["description"] = t.description;
  fn["parameters"] = t.parameters;
  return {{"type", "function"}, {"function", fn}};
}

// Our wording; the call syntax it shows is the one the grammar enforces.
std::string hermes_tools(const std::vector<ToolDef>& tools) {
  std::string out =
      "You can call functions to answer the user. The available functions are listed below as JSON inside "
      "<tools></tools>:\n<tools>\n";
  for (const ToolDef& t : tools) out += tool_json(t).dump() + "\n";
  return out +
         "</tools>\n\nTo call a function, reply with one JSON object per call inside "
         "<tool_call></tool_call>:\n"
         "<tool_call>\n{\"name\": \"<function name>\", \"arguments\": {<arguments as JSON>}}\n</tool_call>";
}

std::string llama3_tools(const std::vector<ToolDef>& tools) {
  std::string out =
      "You can call one of the functions below to answer the request that follows. To call one, reply with "
      "only "
      "a JSON object {\"name\": \"<function name>\", \"parameters\": {<arguments as JSON>}}.\n\n";
  for (const ToolDef& t : tools) out += tool_json(t).dump(4) + "\n\n";
  return out;
}

std::string mistral_tools(const std::vector<ToolDef>& tools) {
  ojson all = ojson::array();
  for (const ToolDef& t : tools) all.push_back(tool_json(t));
  return all.dump();
}

// Arguments verbatim, as the model wrote them (so a history's call is the
// tokens the model generated, and its cached K/V is found again); arguments
// that are not JSON are rendered as a JSON string.
std::string args_text(const ToolCall& c) {
  if (c.arguments.empty()) return "{}";
  if (json::accept(c.arguments)) return c.arguments;
  return json(c.arguments).dump();
}

// One call in the text the call grammar makes the model write.
std::string call_text(ToolFormat f, const ToolCall& c) {
  const std::string head = "{\"name\": " + json(c.name).dump() + ", \"";
  switch (f) {
    case ToolFormat::kLlama3:
      return head + "parameters\": " + args_text(c) + "}";
    case ToolFormat::kMistral:
      return head + "arguments\": " + args_text(c) + ", \"id\": " + json(c.id).dump() + "}";
    case ToolFormat::kHermes:
      break;
  }
  return "<tool_call>\n" + head + "arguments\": " + args_text(c) + "}\n</tool_call>";
}

std::string calls_text(ToolFormat f, const std::vector<ToolCall>& calls) {
  std::string out;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0) out += f == ToolFormat::kHermes ? "\n" : tool_syntax(f).separator;
    out += call_text(f, calls[i]);
  }
  return f == ToolFormat::kMistral ? "[TOOL_CALLS] [" + out + "]" : out;
}

std::string result_text(ToolFormat f, const ChatMessage& m) {
  switch (f) {
    case ToolFormat::kLlama3:
      return m.content;
    case ToolFormat::kMistral:
      return ojson{{"content", m.content}, {"call_id", m.tool_call_id}}.dump();
    case ToolFormat::kHermes:
      break;
  }
  return "<tool_response>\n" + m.content + "\n</tool_response>";
}

// Results of one round of calls: Hermes shares one user turn among them.
const char* result_role(ToolFormat f) {
  switch (f) {
    case ToolFormat::kLlama3:
      return "ipython";
    case ToolFormat::kMistral:
      return "tool";
    case ToolFormat::kHermes:
      break;
  }
  return "user";
}

}  // namespace

std::vector<agentkv::ChatMessage> render_tool_conversation(ToolFormat f, const std::vector<ChatMessage>& msgs,
                                                           const std::vector<ToolDef>& tools) {
  std::vector<agentkv::ChatMessage> out;
  out.reserve(msgs.size() + 2);
  size_t i = 0;
  std::string system;
  if (!msgs.empty() && (msgs[0].role == "system" || msgs[0].role == "developer")) {
    system = msgs[0].content;
    i = 1;
  }
  if (!tools.empty() && f == ToolFormat::kHermes) {
    out.push_back({"system", (system.empty() ? "" : system + "\n\n") + hermes_tools(tools)});
  } else if (!tools.empty() && f == ToolFormat::kLlama3) {
    out.push_back({"system", "Environment: ipython\n" + system});
  } else if (i == 1) {
    out.push_back({"system", system});
  }
  size_t last_user = msgs.size();
  for (size_t k = i; k < msgs.size(); ++k) {
    if (msgs[k].role == "user") last_user = k;
  }
  bool first_user = true;
  for (; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "tool") {
      const std::string turn = result_text(f, m);
      if (f == ToolFormat::kHermes && i > 0 && msgs[i - 1].role == "tool" && !out.empty()) {
        out.back().content += "\n" + turn;
      } else {
        out.push_back({result_role(f), turn});
      }
      continue;
    }
    std::string content = m.content;
    if (m.role == "user" && !tools.empty()) {
      if (f == ToolFormat::kLlama3 && first_user) content = llama3_tools(tools) + content;
      if (f == ToolFormat::kMistral && i == last_user)
        out.push_back({"available_tools", mistral_tools(tools)});
      first_user = false;
    }
    if (!m.tool_calls.empty()) {
      const std::string calls = calls_text(f, m.tool_calls);
      content += (content.empty() || f == ToolFormat::kMistral ? "" : "\n") + calls;
    }
    out.push_back({m.role == "developer" ? "system" : m.role, std::move(content)});
  }
  return out;
}

std::string template_messages_json(const std::vector<ChatMessage>& msgs) {
  ojson arr = ojson::array();
  for (const ChatMessage& m : msgs) {
    ojson o = {{"role", m.role == "developer" ? std::string("system") : m.role}, {"content", m.content}};
    if (!m.name.empty()) o["name"] = m.name;
    if (!m.tool_call_id.empty()) o["tool_call_id"] = m.tool_call_id;
    if (!m.tool_calls.empty()) {
      ojson calls = ojson::array();
      for (const ToolCall& c : m.tool_calls) {
        ojson args = ojson::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
        if (!args.is_object()) args = c.arguments.empty() ? ojson::object() : ojson(c.arguments);
        calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", args}}}});
      }
      o["tool_calls"] = std::move(calls);
    }
    arr.push_back(std::move(o));
  }
  return arr.dump();
}

std::string template_tools_json(const std::vector<ToolDef>& tools) {
  if (tools.empty()) return "";
  ojson arr = ojson::array();
  for (const ToolDef& t : tools) arr.push_back(tool_json(t));
  return arr.dump();
}

std::vector<std::string> tool_call_bare_triggers(ToolFormat f, const GuidedFields& g, bool bare) {
  std::vector<std::string> out;
  if (!bare || f != ToolFormat::kHermes || g.tool_choice != ToolChoice::kAuto) return out;
  // Compact, and pretty-printed with two spaces (as Qwen2.5-Coder writes a
  // fenced call).
  for (const ToolDef& t : g.tools) out.push_back("{\"name\": " + ojson(t.name).dump());
  for (const ToolDef& t : g.tools) out.push_back("{\n  \"name\": " + ojson(t.name).dump());
  return out;
}

std::optional<GrammarSpec> tool_call_grammar(ToolFormat f, const GuidedFields& g, bool bare) {
  if (g.tool_choice == ToolChoice::kNone || g.tools.empty()) return std::nullopt;
  const ToolSyntax& syn = tool_syntax(f);
  const std::string open = f == ToolFormat::kHermes ? "<tool_call>\n" : "";
  const std::string close = f == ToolFormat::kHermes ? "}\n</tool_call>" : "}";
  ojson tags = ojson::array();
  for (const ToolDef& t : g.tools) {
    if (g.tool_choice == ToolChoice::kNamed && t.name != g.tool_name) continue;
    tags.push_back(
        {{"type", "tag"},
         {"begin", open + "{\"name\": " + ojson(t.name).dump() + ", \"" + syn.args_key + "\": "},
         // At most one whitespace character at a time: a small
         // model must not loop on spaces inside a call.
         {"content", {{"type", "json_schema"}, {"json_schema", t.parameters}, {"max_whitespace_cnt", 1}}},
         {"end", close}});
  }
  const bool one = !g.parallel_tool_calls || g.tool_choice == ToolChoice::kNamed;
  const bool any = g.tool_choice == ToolChoice::kAuto;
  const std::string sep = f == ToolFormat::kHermes ? "\n" : syn.separator;
  ojson calls = {{"type", "tags_with_separator"},
                 {"tags", tags},
                 {"separator", sep},
                 {"at_least_one", true},
                 {"stop_after_first", one}};
  ojson format;
  if (f == ToolFormat::kMistral) {
    // The calls are one JSON array after [TOOL_CALLS].
    const ojson section = {{"type", "tag"}, {"begin", "[TOOL_CALLS] ["}, {"content", calls}, {"end", "]"}};
    format = any ? ojson{{"type", "triggered_tags"},
                         {"triggers", ojson::array({"[TOOL_CALLS]"})},
                         {"tags", ojson::array({section})},
                         {"at_least_one", false},
                         {"stop_after_first", true}}
                 : section;
  } else if (any) {
    // Hermes: a call begins at <tool_call>; Llama 3: at {"name": (as xgrammar's own llama format).
    ojson triggers = ojson::array({f == ToolFormat::kHermes ? "<tool_call>" : syn.call_trigger});
    // And a bare Hermes call at {"name": "TOOL" (each its own trigger, so
    // that only a tool's own name starts one).
    const std::vector<std::string> bare_triggers = tool_call_bare_triggers(f, g, bare);
    for (size_t k = 0; k < bare_triggers.size(); ++k) {
      const std::string& t = bare_triggers[k];
      const bool pretty = t.find('\n') != std::string::npos;
      triggers.push_back(t);
      tags.push_back({{"type", "tag"},
                      {"begin", t + (pretty ? ",\n  \"" : ", \"") + syn.args_key + "\": "},
                      {"content", {{"type", "json_schema"},
                                   {"json_schema", g.tools[k % g.tools.size()].parameters},
                                   {"max_whitespace_cnt", 1}}},
                      {"end", pretty ? "\n}" : "}"}});
    }
    format = {{"type", "triggered_tags"},
              {"triggers", triggers},
              {"tags", tags},
              {"at_least_one", false},
              {"stop_after_first", one}};
  } else {
    format = calls;
  }
  return GrammarSpec{GrammarKind::kStructuralTag, ojson{{"type", "structural_tag"}, {"format", format}}.dump()};
}

}  // namespace agentkv::server
