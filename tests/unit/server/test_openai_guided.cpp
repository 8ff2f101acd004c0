// response_format, guided_*, tools and tool_choice: what is accepted, what is
// a 400 naming the field, and the tool-call text parser.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"
#include "server/tool_call_parser.h"
#include "server/tool_calls.h"

namespace agentkv::server {
namespace {

using json = nlohmann::json;

json chat(json extra) {
  json body = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  for (auto& [k, v] : extra.items()) body[k] = v;
  return body;
}

ApiResult<ChatRequest> parse(const json& body) { return parse_chat_request(body.dump(), RequestLimits{}); }

const json kWeather = json::parse(
    R"({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})");

TEST(OpenAiGuided, ResponseFormats) {
  auto r = parse(chat({{"response_format", {{"type", "json_object"}}}}));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r.value().guided.grammar.has_value());
  EXPECT_EQ(r.value().guided.grammar->kind, GrammarKind::kJsonObject);
  r = parse(chat({{"response_format",
                   {{"type", "json_schema"},
                    {"json_schema", {{"name", "x"}, {"strict", true}, {"schema", {{"type", "object"}}}}}}}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().guided.grammar->kind, GrammarKind::kJsonSchema);
  EXPECT_EQ(json::parse(r.value().guided.grammar->text), json({{"type", "object"}}));
  r = parse(chat({{"response_format", {{"type", "text"}}}}));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().guided.grammar.has_value());
  r = parse(chat({{"guided_choice", {"yes", "no \"quoted\""}}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().guided.grammar->text, R"(root ::= "yes" | "no \"quoted\"")");
  auto c = parse_completion_request(json({{"prompt", "x"}, {"guided_regex", "[0-9]+"}}).dump(), RequestLimits{});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().guided.grammar->kind, GrammarKind::kRegex);
}

TEST(OpenAiGuided, ToolChoices) {
  auto r = parse(chat({{"tools", {kWeather}}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().guided.tool_choice, ToolChoice::kAuto);
  r = parse(chat({{"tools", {kWeather}}, {"tool_choice", "required"}, {"parallel_tool_calls", false}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().guided.tool_choice, ToolChoice::kRequired);
  EXPECT_FALSE(r.value().guided.parallel_tool_calls);
  r = parse(chat({{"tools", {kWeather}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().guided.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(r.value().guided.tool_name, "get_weather");
}

TEST(OpenAiGuided, BadFieldsAre400sNamingTheField) {
  const std::vector<std::pair<json, std::string>> cases = {
      {chat({{"tool_choice", "required"}}), "tool_choice"},
      {chat({{"tools", {kWeather}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}),
       "tool_choice.function.name"},
      {chat({{"tools", {kWeather}}, {"tool_choice", "sometimes"}}), "tool_choice"},
      {chat({{"tools", {{{"type", "function"}, {"function", {{"name", "bad name!"}}}}}}}), "tools[0].function.name"},
      {chat({{"tools", {kWeather, kWeather}}}), "tools[1].function.name"},
      {chat({{"tools", {{{"type", "retrieval"}}}}}), "tools[0].type"},
      {chat({{"response_format", {{"type", "xml"}}}}), "response_format.type"},
      {chat({{"response_format", {{"type", "json_object"}}}, {"guided_regex", "a"}}), "guided_regex"},
      {chat({{"response_format", {{"type", "json_object"}}}, {"tools", {kWeather}}, {"tool_choice", "required"}}),
       "response_format"},
      {chat({{"guided_choice", json::array()}}), "guided_choice"},
      {chat({{"guided_choice", {"a", 3}}}), "guided_choice[1]"},
      {chat({{"guided_whitespace_pattern", " "}}), "guided_whitespace_pattern"},
      {chat({{"guided_decoding_backend", "outlines"}}), "guided_decoding_backend"},
      {chat({{"parallel_tool_calls", "yes"}, {"tools", {kWeather}}}), "parallel_tool_calls"},
  };
  for (const auto& [body, param] : cases) {
    auto r = parse(body);
    ASSERT_FALSE(r.ok()) << body.dump();
    EXPECT_EQ(r.error().status, 400) << body.dump();
    EXPECT_EQ(r.error().param, param) << body.dump() << ": " << r.error().message;
  }
  auto c = parse_completion_request(json({{"prompt", "x"}, {"tools", {kWeather}}}).dump(), RequestLimits{});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().param, "tools");
}

TEST(OpenAiGuided, HistoryWithToolCallsAndResults) {
  json body = {{"messages",
                {{{"role", "user"}, {"content", "weather in Paris?"}},
                 {{"role", "assistant"},
                  {"tool_calls",
                   {{{"id", "call_1"},
                     {"type", "function"},
                     {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}}}}}},
                 {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18C"}},
                 {{"role", "tool"}, {"tool_call_id", "call_2"}, {"content", "sunny"}}}},
               {"tools", {kWeather}}};
  auto r = parse(body);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto msgs = render_tool_conversation(ToolFormat::kHermes, r.value().messages, r.value().guided.tools);
  ASSERT_EQ(msgs.size(), 4u);  // system (tools), user, assistant, one user turn for both results
  EXPECT_EQ(msgs[0].role, "system");
  EXPECT_NE(msgs[0].content.find("<tools>\n{\"type\":\"function\",\"function\":{\"name\":\"get_weather\""),
            std::string::npos);
  EXPECT_EQ(msgs[2].content, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>");
  EXPECT_EQ(msgs[3].role, "user");
  EXPECT_EQ(msgs[3].content, "<tool_response>\n18C\n</tool_response>\n<tool_response>\nsunny\n</tool_response>");
  json bad = body;
  bad["messages"][0]["tool_calls"] = json::array();
  EXPECT_EQ(parse(bad).error().param, "messages[0].tool_calls");

  // Llama 3: tools at the head of the first user turn, the call as the
  // assistant's turn, results as ipython turns (one each).
  auto l = render_tool_conversation(ToolFormat::kLlama3, r.value().messages, r.value().guided.tools);
  ASSERT_EQ(l.size(), 5u);
  EXPECT_EQ(l[0].role, "system");
  EXPECT_EQ(l[0].content, "Environment: ipython\n");
  EXPECT_EQ(l[1].role, "user");
  EXPECT_NE(l[1].content.find("\"name\": \"get_weather\""), std::string::npos);
  EXPECT_TRUE(l[1].content.ends_with("weather in Paris?"));
  EXPECT_EQ(l[2].content, R"({"name": "get_weather", "parameters": {"city":"Paris"}})");
  EXPECT_EQ(l[3].role, "ipython");
  EXPECT_EQ(l[3].content, "18C");
  EXPECT_EQ(l[4].role, "ipython");

  // Mistral: [AVAILABLE_TOOLS] before the last user turn, calls with their
  // ids, results with theirs.
  auto m = render_tool_conversation(ToolFormat::kMistral, r.value().messages, r.value().guided.tools);
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].role, "available_tools");
  EXPECT_TRUE(m[0].content.starts_with(R"([{"type":"function","function":{"name":"get_weather")"))
      << m[0].content;
  EXPECT_EQ(m[2].content,
            R"([TOOL_CALLS] [{"name": "get_weather", "arguments": {"city":"Paris"}, "id": "call_1"}])");
  EXPECT_EQ(m[3].role, "tool");
  EXPECT_EQ(m[3].content, R"({"content":"18C","call_id":"call_1"})");
  const std::vector<agentkv::ChatMessage> am(m.begin(), m.end());
  EXPECT_EQ(chat_template_apply(ChatTemplateKind::kMistral, am, true),
            "[AVAILABLE_TOOLS] " + m[0].content + "[/AVAILABLE_TOOLS][INST] weather in Paris? [/INST]" +
                m[2].content + "</s>[TOOL_RESULTS] " + m[3].content + "[/TOOL_RESULTS][TOOL_RESULTS] " +
                m[4].content + "[/TOOL_RESULTS]");
}

TEST(ToolFormat, DetectedFromTheTemplate) {
  EXPECT_EQ(tool_format_detect("<|start_header_id|>{{ 'ipython' }}<|eot_id|>", ChatTemplateKind::kLlama3),
            ToolFormat::kLlama3);
  EXPECT_EQ(tool_format_detect("<|start_header_id|><|eot_id|>", ChatTemplateKind::kLlama3),
            ToolFormat::kHermes);
  EXPECT_EQ(tool_format_detect("[INST][/INST][TOOL_CALLS]", ChatTemplateKind::kMistral),
            ToolFormat::kMistral);
  EXPECT_EQ(tool_format_detect("[INST][/INST]", ChatTemplateKind::kMistral), ToolFormat::kHermes);
  EXPECT_EQ(tool_format_detect("<|im_start|><tool_call>", ChatTemplateKind::kChatml), ToolFormat::kHermes);
  EXPECT_EQ(tool_format_from_name("llama3").value(), ToolFormat::kLlama3);
  EXPECT_FALSE(tool_format_from_name("json").is_ok());
}

struct Assembled {
  std::string content;
  std::vector<ToolCall> calls;  // as the OpenAI SDK assembles streamed deltas
  int deltas_with_args = 0;
};

// Feeds `text` in pieces cut at `cuts` and assembles what comes out.
Assembled stream(ToolFormat f, const std::string& text, const std::vector<size_t>& cuts,
                 std::vector<std::string> bare = {}) {
  ToolCallParser p(f, std::move(bare));
  Assembled a;
  size_t at = 0;
  std::vector<size_t> ends = cuts;
  ends.push_back(text.size());
  const auto take = [&](ToolCallParser::Out o) {
    a.content += o.content;
    for (const ToolCallDelta& d : o.deltas) {
      if (!d.id.empty()) {
        EXPECT_EQ(d.index, static_cast<int>(a.calls.size()));
        EXPECT_TRUE(d.arguments.empty());
        a.calls.push_back({d.id, d.name, ""});
      } else {
        EXPECT_EQ(d.index + 1, static_cast<int>(a.calls.size())) << "arguments for a call not begun";
        a.calls.back().arguments += d.arguments;
        ++a.deltas_with_args;
      }
    }
  };
  for (size_t end : ends) {
    take(p.push(text.substr(at, end - at)));
    at = end;
  }
  take(p.flush());
  return a;
}

TEST(ToolCallParser, SplitsContentAndCallsAtEveryCutInEveryFormat) {
  struct Case {
    ToolFormat format;
    std::string text, content;
  };
  const std::vector<Case> cases = {
      {ToolFormat::kHermes,
       "Let me check.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\\\"\"]}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>",
       "Let me check.\n"},
      {ToolFormat::kLlama3,
       "Let me check.{\"name\": \"f\", \"parameters\": {\"a\": [1, \"}\\\"\"]}}; {\"name\": \"g\", "
       "\"parameters\": {}}",
       "Let me check."},
      {ToolFormat::kMistral,
       "Let me check.[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\\\"\"]}}, {\"name\": "
       "\"g\", "
       "\"arguments\": {}}]",
       "Let me check."},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(tool_format_name(c.format));
    for (size_t cut = 0; cut <= c.text.size(); ++cut) {
      const Assembled a = stream(c.format, c.text, {cut});
      ASSERT_EQ(a.content, c.content) << cut;
      ASSERT_EQ(a.calls.size(), 2u) << cut;
      EXPECT_EQ(a.calls[0].name, "f");
      EXPECT_EQ(a.calls[0].arguments, R"({"a": [1, "}\""]})") << cut;  // the model's text, verbatim
      EXPECT_EQ(a.calls[1].name, "g");
      EXPECT_EQ(a.calls[1].arguments, "{}");
      EXPECT_NE(a.calls[0].id, a.calls[1].id);
    }
    // Fed a byte at a time, the arguments come in pieces, and they add up
    // to what the whole text parses to.
    std::vector<size_t> every;
    for (size_t i = 1; i < c.text.size(); ++i) every.push_back(i);
    const Assembled bytes = stream(c.format, c.text, every);
    EXPECT_GT(bytes.deltas_with_args, 5);
    const ParsedToolCalls whole = parse_tool_calls(c.format, c.text);
    ASSERT_EQ(whole.calls.size(), 2u);
    EXPECT_EQ(whole.calls[0].arguments, bytes.calls[0].arguments);
    EXPECT_EQ(whole.content, c.content);
  }
}

TEST(ToolCallParser, BareJsonCallsNamingAToolUnderAuto) {
  // Qwen2.5-Coder answers auto with a bare object, no <tool_call>: with the
  // bare triggers of the offered tools it is a call, at every cut; an object
  // naming anything else stays content.
  GuidedFields g;
  g.tool_choice = ToolChoice::kAuto;
  g.tools = {ToolDef{"get_weather", "", nlohmann::ordered_json::object()}, ToolDef{"f", "", {}}};
  const std::vector<std::string> bare = tool_call_bare_triggers(ToolFormat::kHermes, g, true);
  ASSERT_EQ(bare, (std::vector<std::string>{R"({"name": "get_weather")", R"({"name": "f")",
                                            "{\n  \"name\": \"get_weather\"", "{\n  \"name\": \"f\""}));
  const std::string text = "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const Assembled a = stream(ToolFormat::kHermes, text, {cut}, bare);
    ASSERT_EQ(a.calls.size(), 1u) << cut;
    EXPECT_EQ(a.calls[0].name, "get_weather");
    EXPECT_EQ(a.calls[0].arguments, R"({"city": "Paris"})") << cut;
    EXPECT_EQ(a.content, "```json\n\n```") << cut;
  }
  // Pretty-printed, as Qwen2.5-Coder fences them.
  const ParsedToolCalls pretty = parse_tool_calls(
      ToolFormat::kHermes, "```json\n{\n  \"name\": \"f\",\n  \"arguments\": {\"x\": 1}\n}\n```", bare);
  ASSERT_EQ(pretty.calls.size(), 1u);
  EXPECT_EQ(pretty.calls[0].name, "f");
  EXPECT_EQ(pretty.calls[0].arguments, R"({"x": 1})");
  const ParsedToolCalls other =
      parse_tool_calls(ToolFormat::kHermes, R"({"name": "Alice", "age": 30})", bare);
  EXPECT_TRUE(other.calls.empty());
  EXPECT_EQ(other.content, R"({"name": "Alice", "age": 30})");
  // Off unless asked, and only for auto in the Hermes format.
  EXPECT_TRUE(tool_call_bare_triggers(ToolFormat::kHermes, g, false).empty());
  EXPECT_TRUE(tool_call_bare_triggers(ToolFormat::kLlama3, g, true).empty());
  g.tool_choice = ToolChoice::kRequired;
  EXPECT_TRUE(tool_call_bare_triggers(ToolFormat::kHermes, g, true).empty());
  EXPECT_TRUE(parse_tool_calls(ToolFormat::kHermes, text).calls.empty());
  // The grammar takes the bare form as a trigger of its own, per tool.
  g.tool_choice = ToolChoice::kAuto;
  const auto spec = tool_call_grammar(ToolFormat::kHermes, g, true);
  ASSERT_TRUE(spec.has_value());
  EXPECT_NE(spec->text.find(R"({\"name\": \"get_weather\", \"arguments\": )"), std::string::npos) << spec->text;
}

TEST(ToolCallParser, HoldsPartialTriggersAndKeepsWhatIsNotACall) {
  // A partial tag is held back until it is known not to be one.
  ToolCallParser p;
  EXPECT_EQ(p.push("a <tool").content, "a ");
  EXPECT_EQ(p.push("box").content, "<toolbox");
  // An unfinished head or a call that is not JSON stays text.
  ParsedToolCalls q = parse_tool_calls(ToolFormat::kHermes, "<tool_call>{\"name\": ");
  EXPECT_TRUE(q.calls.empty());
  EXPECT_EQ(q.content, "<tool_call>{\"name\": ");
  EXPECT_EQ(parse_tool_calls(ToolFormat::kHermes, "<tool_call>not json</tool_call>").content,
            "<tool_call>not json</tool_call>");
  EXPECT_EQ(parse_tool_calls(ToolFormat::kMistral, "[TOOL_CALLS] nothing").content, "[TOOL_CALLS] nothing");
  // Cut off inside the arguments: streamed pieces went out; a whole response
  // returns the text as content, with no call.
  ParsedToolCalls cut = parse_tool_calls(ToolFormat::kLlama3, "{\"name\": \"f\", \"parameters\": {\"a\": 1");
  EXPECT_TRUE(cut.calls.empty());
  EXPECT_EQ(cut.content, "{\"name\": \"f\", \"parameters\": {\"a\": 1");
  // Keys in another order: held whole and released in one piece at the end.
  ParsedToolCalls swapped = parse_tool_calls(
      ToolFormat::kHermes, "<tool_call>{\"arguments\": {\"x\": 2}, \"name\": \"h\"}</tool_call> ok");
  ASSERT_EQ(swapped.calls.size(), 1u);
  EXPECT_EQ(swapped.calls[0].name, "h");
  EXPECT_EQ(swapped.calls[0].arguments, R"({"x":2})");
  EXPECT_EQ(swapped.content, " ok");
  // A scalar argument value and a key after it (Mistral's id in a history).
  ParsedToolCalls tail = parse_tool_calls(
      ToolFormat::kMistral, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": 7 , \"id\": \"x\"}]");
  ASSERT_EQ(tail.calls.size(), 1u);
  EXPECT_EQ(tail.calls[0].arguments, "7");
  EXPECT_TRUE(tail.content.empty());
}

}  // namespace
}  // namespace agentkv::server
