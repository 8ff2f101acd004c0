// response_format, guided_*, tools and tool_choice: what is accepted, what is
// a 400 naming the field, and the tool-call text parser.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"
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
  const auto msgs = render_tool_conversation(r.value().messages, r.value().guided.tools);
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
}

TEST(ToolCallParser, SplitsContentAndCallsAcrossChunks) {
  const std::string text =
      "Let me check.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
  // Every split point gives the same content and calls.
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ToolCallParser p;
    ToolCallParser::Out a = p.push(text.substr(0, cut)), b = p.push(text.substr(cut)), c = p.flush();
    std::string content = a.content + b.content + c.content;
    std::vector<ToolCall> calls = a.calls;
    calls.insert(calls.end(), b.calls.begin(), b.calls.end());
    ASSERT_EQ(content, "Let me check.\n") << cut;
    ASSERT_EQ(calls.size(), 2u) << cut;
    EXPECT_EQ(calls[0].name, "f");
    EXPECT_EQ(calls[0].arguments, R"({"a":1})");
    EXPECT_EQ(calls[1].name, "g");
    EXPECT_NE(calls[0].id, calls[1].id);
  }
  // A partial tag is held back until it is known not to be one.
  ToolCallParser p;
  EXPECT_EQ(p.push("a <tool").content, "a ");
  EXPECT_EQ(p.push("box").content, "<toolbox");
  // An unfinished or malformed call stays text.
  ToolCallParser q;
  EXPECT_TRUE(q.push("<tool_call>{\"name\": ").calls.empty());
  EXPECT_EQ(q.flush().content, "<tool_call>{\"name\": ");
  ToolCallParser r;
  EXPECT_EQ(r.push("<tool_call>not json</tool_call>").content, "<tool_call>not json</tool_call>");
}

}  // namespace
}  // namespace agentkv::server
