// The grammar module over a small byte vocabulary: compilation, the cache,
// the limits, and matchers that a greedy "model" drives to the end.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "grammar/grammar_cache.h"
#include "server/openai_guided.h"
#include "server/tool_call_parser.h"
#include "server/tool_calls.h"

namespace agentkv {
namespace {

using json = nlohmann::json;

constexpr int32_t kEos = 0;

// id 0 the end token, then every printable ASCII byte and '\n', then a few
// multi-byte pieces, as a BPE vocabulary has.
std::vector<std::string> pieces() {
  std::vector<std::string> v{"</s>"};
  for (int c = 32; c < 127; ++c) v.push_back(std::string(1, static_cast<char>(c)));
  v.push_back("\n");
  for (const char* p : {"{\"", "\":", "\"}", "name", "true", "false", "null", ", ", "<tool_call>"}) v.push_back(p);
  return v;
}

std::unique_ptr<GrammarCache> make_cache(int32_t max_entries = 256) {
  const std::vector<std::string> v = pieces();
  auto c = GrammarCache::create(v, {kEos}, static_cast<int32_t>(v.size()) + 3, max_entries);  // 3 padding ids
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  return std::move(c).value();
}

bool allowed(const std::vector<uint32_t>& mask, int32_t id) { return (mask[id >> 5] >> (id & 31)) & 1u; }

// Drives a matcher to its end, choosing at each step the allowed token the
// `prefer` ranking likes best (a stand-in for a model's argmax); returns the text.
std::string drive(const TokenConstraint& g, int32_t n_vocab, const std::vector<std::string>& vocab,
                  const std::string& prefer, int max_steps = 400) {
  auto m = g.matcher();
  std::vector<uint32_t> mask((n_vocab + 31) / 32);
  std::string out;
  for (int step = 0; step < max_steps; ++step) {
    m->fill_mask(mask);
    int32_t pick = -1;
    // Prefer tokens whose text continues `prefer` at the current offset; else the end; else the lowest id.
    for (int32_t id = 1; id < static_cast<int32_t>(vocab.size()) && pick < 0; ++id) {
      if (allowed(mask, id) && prefer.compare(out.size() < prefer.size() ? out.size() : prefer.size(),
                                              vocab[id].size(), vocab[id]) == 0) {
        pick = id;
      }
    }
    if (pick < 0 && allowed(mask, kEos)) pick = kEos;
    // Then whatever closes a string or an object soonest, then the lowest id.
    for (const char* close : {"\"", "}", "\n", "0", "a"}) {
      for (int32_t id = 1; id < static_cast<int32_t>(vocab.size()) && pick < 0; ++id) {
        if (allowed(mask, id) && vocab[id] == close) pick = id;
      }
    }
    for (int32_t id = 1; id < static_cast<int32_t>(vocab.size()) && pick < 0; ++id) {
      if (allowed(mask, id)) pick = id;
    }
    EXPECT_GE(pick, 0) << "nothing allowed after '" << out << "'";
    if (pick < 0) return out;
    // Padding ids past the vocabulary are never allowed.
    for (int32_t id = static_cast<int32_t>(vocab.size()); id < n_vocab; ++id) EXPECT_FALSE(allowed(mask, id));
    EXPECT_TRUE(m->accept(pick));
    if (pick == kEos) {
      EXPECT_TRUE(m->terminated());
      return out;
    }
    out += vocab[pick];
  }
  ADD_FAILURE() << "no end after " << max_steps << " tokens: " << out;
  return out;
}

TEST(GrammarCache, JsonSchemaOutputIsValid) {
  auto cache = make_cache();
  const std::string schema =
      R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"ok":{"type":"boolean"}},"required":["name","age","ok"]})";
  auto g = cache->get({GrammarKind::kJsonSchema, schema});
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  const std::string text = drive(**g, cache->n_vocab(), pieces(), R"({"name": "bob", "age": 42, "ok": true})");
  const json j = json::parse(text);
  EXPECT_EQ(j["name"], "bob");
  EXPECT_EQ(j["age"], 42);
  EXPECT_EQ(j["ok"], true);
  // A ranking that wants other text still ends in valid JSON of the schema.
  const json k = json::parse(drive(**g, cache->n_vocab(), pieces(), "hello"));
  EXPECT_TRUE(k["name"].is_string());
  EXPECT_TRUE(k["age"].is_number_integer());
  EXPECT_TRUE(k["ok"].is_boolean());
}

TEST(GrammarCache, RegexChoiceAndEbnf) {
  auto cache = make_cache();
  auto re = cache->get({GrammarKind::kRegex, "[0-9]{3}-[a-z]+"});
  ASSERT_TRUE(re.is_ok()) << re.status().message();
  EXPECT_EQ(drive(**re, cache->n_vocab(), pieces(), "123-abc"), "123-abc");
  auto ebnf = cache->get({GrammarKind::kEbnf, R"(root ::= "yes" | "no")"});
  ASSERT_TRUE(ebnf.is_ok()) << ebnf.status().message();
  EXPECT_EQ(drive(**ebnf, cache->n_vocab(), pieces(), "n"), "no");
  auto obj = cache->get({GrammarKind::kJsonObject, ""});
  ASSERT_TRUE(obj.is_ok());
  EXPECT_TRUE(json::parse(drive(**obj, cache->n_vocab(), pieces(), "{}")).is_object());
}

TEST(GrammarCache, CachesByKindAndText) {
  auto cache = make_cache(/*max_entries=*/2);
  auto a = cache->get({GrammarKind::kRegex, "a+"});
  auto b = cache->get({GrammarKind::kRegex, "a+"});
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(cache->stats().hits, 1);
  EXPECT_EQ(cache->stats().misses, 1);
  EXPECT_GT(cache->stats().compile_seconds, 0.0);
  // The same text as another kind is another grammar.
  ASSERT_TRUE(cache->get({GrammarKind::kEbnf, R"(root ::= "a+")"}).is_ok());
  ASSERT_TRUE(cache->get({GrammarKind::kRegex, "b+"}).is_ok());
  EXPECT_EQ(cache->stats().entries, 2);  // LRU: "a+" (regex) was evicted
  ASSERT_TRUE(cache->get({GrammarKind::kRegex, "a+"}).is_ok());
  EXPECT_EQ(cache->stats().misses, 4);
}

TEST(GrammarCache, BadGrammarsAreInvalidArgument) {
  auto cache = make_cache();
  for (const GrammarSpec& s : std::vector<GrammarSpec>{
           {GrammarKind::kJsonSchema, "{not json"},
           {GrammarKind::kJsonSchema, R"({"type": "no-such-type"})"},
           {GrammarKind::kRegex, "(unclosed"},
           {GrammarKind::kRegex, "(a{100}){100}"},
           {GrammarKind::kRegex, "a{5000}"},
           {GrammarKind::kRegex, std::string(kMaxRegexBytes + 1, 'a')},
           {GrammarKind::kEbnf, "root ::= undefined_rule"},
           {GrammarKind::kEbnf, "no rule here"},
           {GrammarKind::kJsonSchema, std::string(kMaxGrammarBytes + 1, ' ')},
           {GrammarKind::kStructuralTag, R"({"type": "structural_tag", "format": {"type": "nope"}})"},
           // Keywords xgrammar would skip are refused, not weakened.
           {GrammarKind::kJsonSchema, R"({"type": "array", "uniqueItems": true})"},
           {GrammarKind::kJsonSchema, R"({"properties": {"a": {"not": {"type": "string"}}}})"},
           {GrammarKind::kJsonSchema, R"({"oneOf": [{"type": "integer"}, {"minimum": 2}]})"},
           {GrammarKind::kJsonSchema, R"({"type": "number", "multipleOf": 0.5})"},
           {GrammarKind::kJsonSchema, R"({"$ref": "http://example.com/s.json"})"},
           {GrammarKind::kJsonSchema, std::string(100, '[') + std::string(100, ']')},
           {GrammarKind::kJsonSchema, R"({"type": "string", "maxLength": 1000000})"},
       }) {
    auto g = cache->get(s);
    ASSERT_FALSE(g.is_ok()) << s.text.substr(0, 60);
    EXPECT_EQ(g.status().code(), ErrorCode::kInvalidArgument) << g.status().message();
    EXPECT_FALSE(g.status().message().empty());
  }
  // Within the limits, nested counts pass, and a property may be named like a keyword.
  EXPECT_TRUE(cache->get({GrammarKind::kRegex, "(a{10}){10}"}).is_ok());
  auto named = cache->get({GrammarKind::kJsonSchema, R"({"type": "object", "properties": {"not": {"type": "integer"}}})"});
  EXPECT_TRUE(named.is_ok()) << named.status().message();
}

// In every tool format: required forces one well-formed call whatever the
// "model" prefers, auto leaves free text free, a call the model begins is
// finished in the format, and the calls a history renders are ones the
// grammar accepts (the model sees its own format).
TEST(GrammarCache, ToolCallGrammarForcesACallInEveryFormat) {
  using server::ToolFormat;
  auto cache = make_cache();
  server::GuidedFields g;
  server::ToolDef t;
  t.name = "get_weather";
  t.parameters = nlohmann::ordered_json::parse(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})");
  g.tools.push_back(t);
  for (ToolFormat f : {ToolFormat::kHermes, ToolFormat::kLlama3, ToolFormat::kMistral}) {
    SCOPED_TRACE(server::tool_format_name(f));
    g.tool_choice = server::ToolChoice::kRequired;
    g.parallel_tool_calls = false;
    auto spec = server::tool_call_grammar(f, g);
    ASSERT_TRUE(spec.has_value());
    auto c = cache->get(*spec);
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    const std::string text = drive(**c, cache->n_vocab(), pieces(), "no thanks");
    server::ParsedToolCalls out = server::parse_tool_calls(f, text);
    ASSERT_EQ(out.calls.size(), 1u) << text;
    EXPECT_EQ(out.calls[0].name, "get_weather");
    EXPECT_TRUE(json::parse(out.calls[0].arguments)["city"].is_string()) << text;
    EXPECT_EQ(out.calls[0].id.size(), f == ToolFormat::kMistral ? 9u : 29u);
    EXPECT_TRUE(out.content.empty()) << text;

    // The call a history renders is the text the grammar makes.
    server::ChatMessage call_turn;
    call_turn.role = "assistant";
    call_turn.tool_calls.push_back({"abcdefghi", "get_weather", R"({"city": "Paris"})"});
    const auto msgs = server::render_tool_conversation(f, {call_turn}, {});
    ASSERT_EQ(msgs.size(), 1u);
    std::string rendered = msgs[0].content;
    if (f == ToolFormat::kMistral)
      rendered.replace(rendered.find(", \"id\""), 19, "");  // ids are history only
    EXPECT_EQ(drive(**c, cache->n_vocab(), pieces(), rendered), rendered);

    // auto: free text is allowed and ends there; a call the model begins is parsed.
    g.tool_choice = server::ToolChoice::kAuto;
    auto a = cache->get(*server::tool_call_grammar(f, g));
    ASSERT_TRUE(a.is_ok()) << a.status().message();
    EXPECT_EQ(drive(**a, cache->n_vocab(), pieces(), "hi"), "hi");
    const std::string with_call = drive(**a, cache->n_vocab(), pieces(), "ok " + rendered);
    EXPECT_EQ(with_call, "ok " + rendered);
    out = server::parse_tool_calls(f, with_call);
    ASSERT_EQ(out.calls.size(), 1u) << with_call;
    EXPECT_EQ(out.calls[0].arguments, R"({"city": "Paris"})");
    EXPECT_EQ(out.content, "ok ");
  }
}

}  // namespace
}  // namespace agentkv
