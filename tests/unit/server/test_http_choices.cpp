// n > 1 and lists of prompts over a real socket, against FakeServingEngine:
// how choices are indexed, seeded, submitted (followers after their leader's
// first event) and streamed.
#include <gtest/gtest.h>
#include <httplib.h>

#include <map>
#include <string>
#include <vector>

#include "http_server_test_util.h"

namespace agentkv::server {
namespace {

using json = nlohmann::json;
using test::HttpServerTest;
using test::parse_sse;

TEST_F(HttpServerTest, NChoicesAreIndexedAndSeededSeedPlusIndex) {
  start();
  auto r = post("/v1/completions", {{"prompt", "hello"},
                                    {"max_tokens", 3},
                                    {"n", 4},
                                    {"seed", 100},
                                    {"temperature", 0.8},
                                    {"top_k", 5},
                                    {"min_p", 0.1}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  ASSERT_EQ(j["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], engine_.script_text(3));
  }
  const auto reqs = engine_.submitted_requests();
  ASSERT_EQ(reqs.size(), 4u);
  std::vector<uint64_t> seeds;
  for (const auto& q : reqs) {
    seeds.push_back(q.sampling.seed);
    EXPECT_EQ(q.prompt, reqs[0].prompt);
    EXPECT_EQ(q.sampling.top_k, 5);
    EXPECT_FLOAT_EQ(q.sampling.min_p, 0.1f);
  }
  EXPECT_EQ(seeds, (std::vector<uint64_t>{100, 101, 102, 103}));
  // The prompt counts once; completions add up; every choice prefilled the
  // prompt minus the fake's one cached token.
  const size_t n_prompt = reqs[0].prompt.size();
  EXPECT_EQ(j["usage"]["prompt_tokens"], n_prompt);
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["prefilled_tokens"], 4 * (n_prompt - 1));
}

TEST_F(HttpServerTest, SamplingFieldsReachTheEngine) {
  start();
  auto r = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                         {"max_tokens", 2},
                                         {"repetition_penalty", 1.2},
                                         {"frequency_penalty", -0.5},
                                         {"presence_penalty", 0.25},
                                         {"logit_bias", {{"3", -100}, {"1", 4.5}}},
                                         {"stop_token_ids", {2}},
                                         {"ignore_eos", true},
                                         {"logprobs", true},
                                         {"top_logprobs", 20}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const auto q = engine_.submitted_requests().at(0);
  EXPECT_FLOAT_EQ(q.sampling.repetition_penalty, 1.2f);
  EXPECT_FLOAT_EQ(q.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(q.sampling.presence_penalty, 0.25f);
  std::map<int32_t, float> bias(q.sampling.logit_bias.begin(), q.sampling.logit_bias.end());
  EXPECT_EQ(bias, (std::map<int32_t, float>{{1, 4.5f}, {3, -100.0f}}));
  EXPECT_EQ(q.stop_token_ids, std::vector<int32_t>{2});
  EXPECT_TRUE(q.ignore_eos);
  EXPECT_EQ(q.sampling.n_logprobs, 20);
}

TEST_F(HttpServerTest, LogitBiasOutsideTheVocabularyIs400) {
  start();
  const std::string id = std::to_string(engine_.vocab_size());
  auto r = post("/v1/completions", {{"prompt", "hello"}, {"logit_bias", {{id, 1}}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "logit_bias");
  EXPECT_TRUE(engine_.submitted_requests().empty());
}

TEST_F(HttpServerTest, ListOfPromptsTimesNIsIndexedPromptMajor) {
  start();
  auto r = post("/v1/completions",
                {{"prompt", {"hello", "hello world"}}, {"max_tokens", 2}, {"n", 2}, {"echo", true}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  ASSERT_EQ(j["choices"].size(), 4u);
  // As OpenAI: choice i * n + j answers prompt i.
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(j["choices"][c]["index"], c);
    EXPECT_EQ(j["choices"][c]["text"], std::string(c < 2 ? "hello" : "hello world") + engine_.script_text(2));
  }
  const auto reqs = engine_.submitted_requests();
  ASSERT_EQ(reqs.size(), 4u);
  const auto p0 = engine_.tokenizer().encode("hello", true, false);
  const auto p1 = engine_.tokenizer().encode("hello world", true, false);
  int n0 = 0, n1 = 0;
  for (const auto& q : reqs) {
    n0 += q.prompt == p0;
    n1 += q.prompt == p1;
  }
  EXPECT_EQ(n0, 2);
  EXPECT_EQ(n1, 2);
  EXPECT_EQ(j["usage"]["prompt_tokens"], p0.size() + p1.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);

  auto ids = post("/v1/completions", {{"prompt", {p0, p1}}, {"max_tokens", 1}});
  ASSERT_TRUE(ids);
  ASSERT_EQ(ids->status, 200) << ids->body;
  EXPECT_EQ(json::parse(ids->body)["choices"].size(), 2u);
}

TEST_F(HttpServerTest, StreamedNChoicesCarryTheirIndex) {
  start();
  auto r = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                         {"max_tokens", 3},
                                         {"n", 3},
                                         {"stream", true},
                                         {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const std::vector<json> ev = parse_sse(r->body);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev.back(), "[DONE]");
  std::map<int, std::string> text;
  std::map<int, int> roles, finishes;
  for (size_t i = 0; i + 2 < ev.size(); ++i) {
    ASSERT_EQ(ev[i]["choices"].size(), 1u);
    const json& c = ev[i]["choices"][0];
    const int idx = c["index"];
    if (c["delta"].contains("role")) ++roles[idx];
    if (c["delta"].contains("content")) text[idx] += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) ++finishes[idx];
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(roles[i], 1) << i;
    EXPECT_EQ(finishes[i], 1) << i;
    EXPECT_EQ(text[i], engine_.script_text(3)) << i;
  }
  EXPECT_EQ(ev[ev.size() - 2]["usage"]["completion_tokens"], 9);
}

}  // namespace
}  // namespace agentkv::server
