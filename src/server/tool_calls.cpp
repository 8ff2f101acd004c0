#include "server/tool_calls.h"

#include <random>

#include <nlohmann/json.hpp>

namespace agentkv::server {
namespace {

using json = nlohmann::json;

// The instructions that introduce the tools (our wording of the Hermes format).
constexpr const char* kToolsIntro =
    "You can call functions to answer the user. The available functions are listed below as JSON inside "
    "<tools></tools>:\n<tools>\n";
constexpr const char* kToolsOutro =
    "</tools>\n\nTo call a function, reply with one JSON object per call inside <tool_call></tool_call>:\n"
    "<tool_call>\n{\"name\": \"<function name>\", \"arguments\": {<arguments as JSON>}}\n</tool_call>";

std::string tools_block(const std::vector<ToolDef>& tools) {
  std::string out = kToolsIntro;
  for (const ToolDef& t : tools) {
    nlohmann::ordered_json fn = {{"name", t.name}};
    if (!t.description.empty()) fn["description"] = t.description;
    fn["parameters"] = t.parameters;
    out += nlohmann::ordered_json{{"type", "function"}, {"function", fn}}.dump() + "\n";
  }
  return out + kToolsOutro;
}

// A call as the model writes it; arguments that are not JSON are kept as a string.
std::string call_text(const ToolCall& c) {
  json args = json::parse(c.arguments.empty() ? "{}" : c.arguments, nullptr, /*allow_exceptions=*/false);
  if (args.is_discarded()) args = c.arguments;
  // The exact text the call grammar makes the model write (tool_call_grammar).
  return std::string(kToolCallBegin) + "\n{\"name\": " + json(c.name).dump() + ", \"arguments\": " + args.dump() +
         "}\n" + kToolCallEnd;
}

// The longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag_len(const std::string& s, const std::string& tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.compare(s.size() - n, n, tag, 0, n) == 0) return n;
  }
  return 0;
}

std::optional<ToolCall> parse_call(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string()) return std::nullopt;
  ToolCall c;
  c.id = new_tool_call_id();
  c.name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");  // Llama-3's key for the same thing
  c.arguments = args == j.end() ? "{}" : args->dump();
  return c;
}

}  // namespace

std::vector<agentkv::ChatMessage> render_tool_conversation(const std::vector<ChatMessage>& msgs,
                                                           const std::vector<ToolDef>& tools) {
  std::vector<agentkv::ChatMessage> out;
  out.reserve(msgs.size() + 1);
  size_t i = 0;
  if (!tools.empty()) {
    std::string system;
    if (!msgs.empty() && (msgs[0].role == "system" || msgs[0].role == "developer")) {
      system = msgs[0].content + "\n\n";
      i = 1;
    }
    out.push_back({"system", system + tools_block(tools)});
  }
  for (; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "tool") {
      std::string turn = "<tool_response>\n" + m.content + "\n</tool_response>";
      // Consecutive results (parallel calls) share one user turn.
      if (i > 0 && msgs[i - 1].role == "tool" && !out.empty()) {
        out.back().content += "\n" + turn;
      } else {
        out.push_back({"user", turn});
      }
      continue;
    }
    std::string content = m.content;
    for (const ToolCall& c : m.tool_calls) content += (content.empty() ? "" : "\n") + call_text(c);
    out.push_back({m.role == "developer" ? "system" : m.role, std::move(content)});
  }
  return out;
}

std::optional<GrammarSpec> tool_call_grammar(const GuidedFields& g) {
  if (g.tool_choice == ToolChoice::kNone || g.tools.empty()) return std::nullopt;
  using ojson = nlohmann::ordered_json;  // keeps the schemas' property order
  ojson tags = ojson::array();
  for (const ToolDef& t : g.tools) {
    if (g.tool_choice == ToolChoice::kNamed && t.name != g.tool_name) continue;
    tags.push_back({{"type", "tag"},
                    {"begin", std::string(kToolCallBegin) + "\n{\"name\": " + ojson(t.name).dump() + ", \"arguments\": "},
                    // At most one whitespace character at a time: a small
                    // model must not loop on spaces inside a call.
                    {"content", {{"type", "json_schema"}, {"json_schema", t.parameters}, {"max_whitespace_cnt", 1}}},
                    {"end", std::string("}\n") + kToolCallEnd}});
  }
  const bool one = !g.parallel_tool_calls || g.tool_choice == ToolChoice::kNamed;
  ojson format;
  if (g.tool_choice == ToolChoice::kAuto) {
    format = {{"type", "triggered_tags"},
              {"triggers", ojson::array({kToolCallBegin})},
              {"tags", tags},
              {"at_least_one", false},
              {"stop_after_first", one}};
  } else {
    format = {{"type", "tags_with_separator"},
              {"tags", tags},
              {"separator", "\n"},
              {"at_least_one", true},
              {"stop_after_first", one}};
  }
  return GrammarSpec{GrammarKind::kStructuralTag, ojson{{"type", "structural_tag"}, {"format", format}}.dump()};
}

std::string new_tool_call_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kHex[rng() & 15];
  return id;
}

ToolCallParser::Out ToolCallParser::push(const std::string& text) {
  buf_ += text;
  Out out;
  for (;;) {
    if (!in_call_) {
      const size_t b = buf_.find(kToolCallBegin);
      if (b == std::string::npos) {
        const size_t keep = partial_tag_len(buf_, kToolCallBegin);
        out.content += buf_.substr(0, buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
        return out;
      }
      out.content += buf_.substr(0, b);
      buf_.erase(0, b + std::string(kToolCallBegin).size());
      in_call_ = true;
    }
    const size_t e = buf_.find(kToolCallEnd);
    if (e == std::string::npos) return out;
    std::optional<ToolCall> call = parse_call(buf_.substr(0, e));
    if (call) {
      out.calls.push_back(std::move(*call));
    } else {
      out.content += std::string(kToolCallBegin) + buf_.substr(0, e) + kToolCallEnd;
    }
    buf_.erase(0, e + std::string(kToolCallEnd).size());
    in_call_ = false;
  }
}

ToolCallParser::Out ToolCallParser::flush() {
  Out out;
  out.content = (in_call_ ? std::string(kToolCallBegin) : std::string()) + buf_;
  buf_.clear();
  in_call_ = false;
  return out;
}

}  // namespace agentkv::server
