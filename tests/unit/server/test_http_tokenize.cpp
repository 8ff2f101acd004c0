// POST /tokenize and /detokenize (vLLM's bodies) over a real socket, against
// FakeServingEngine's tokenizer.
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <vector>

#include "http_server_test_util.h"

namespace agentkv::server {
namespace {

using json = nlohmann::json;
using test::HttpServerTest;

TEST_F(HttpServerTest, TokenizeAndDetokenizeRoundTrip) {
  start();
  auto r = post("/tokenize", {{"model", "tiny"}, {"prompt", "hello world"}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  // As a completions prompt is tokenized.
  const std::vector<int32_t> want = engine_.tokenizer().encode("hello world", true, true);
  EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), want);
  EXPECT_EQ(j["count"], want.size());
  EXPECT_EQ(j["max_model_len"], engine_.max_model_len());

  auto d = post("/detokenize", {{"model", "tiny"}, {"tokens", want}});
  ASSERT_TRUE(d);
  ASSERT_EQ(d->status, 200) << d->body;
  EXPECT_EQ(json::parse(d->body)["prompt"], engine_.tokenizer().decode(want));

  auto plain = post("/tokenize", {{"prompt", "hello"}, {"add_special_tokens", false}});
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200);
  EXPECT_EQ(json::parse(plain->body)["tokens"].get<std::vector<int32_t>>(),
            engine_.tokenizer().encode("hello", false, true));
}

TEST_F(HttpServerTest, TokenizeErrorsNameTheField) {
  start();
  struct Case {
    const char* path;
    json body;
    int status;
    const char* param;
  };
  const std::vector<Case> cases = {
      {"/tokenize", {{"model", "tiny"}}, 400, "prompt"},
      {"/tokenize", {{"prompt", 5}}, 400, "prompt"},
      {"/tokenize", {{"prompt", "x"}, {"add_special_tokens", "no"}}, 400, "add_special_tokens"},
      {"/tokenize", {{"prompt", "x"}, {"model", "nope"}}, 404, "model"},
      {"/detokenize", {{"model", "tiny"}}, 400, "tokens"},
      {"/detokenize", {{"tokens", "1,2"}}, 400, "tokens"},
      {"/detokenize", {{"tokens", {1, -1}}}, 400, "tokens"},
      {"/detokenize", {{"tokens", {1, 1000000}}}, 400, "tokens"},
      {"/detokenize", {{"tokens", {1.5}}}, 400, "tokens"},
  };
  for (const Case& c : cases) {
    auto r = post(c.path, c.body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, c.status) << c.path << " " << c.body.dump() << " -> " << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], c.param) << c.body.dump();
  }
}

}  // namespace
}  // namespace agentkv::server
