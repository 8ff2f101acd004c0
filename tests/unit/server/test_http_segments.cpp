// POST/GET/DELETE /v1/segments over a real socket against FakeServingEngine:
// the body's text or tokens reach the engine with the API key's tenant and
// the cache_salt; a tenant lists and deletes only its own segments; every
// bad input is an OpenAI error naming the field, and nothing reaches the
// engine for one the handler rejects.
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <vector>

#include "http_server_test_util.h"

namespace agentkv::server {
namespace {

using json = nlohmann::json;
using test::HttpServerTest;

class Segments : public HttpServerTest {
 protected:
  void start_with_keys() {
    ServerConfig cfg;
    cfg.api_keys = {{"ka", "tenant-a"}, {"kb", "tenant-b"}};
    start(cfg);
  }
  static httplib::Headers key(const std::string& k) { return {{"Authorization", "Bearer " + k}}; }
  httplib::Result get(const std::string& path, const std::string& k) {
    return client().Get(path.c_str(), key(k));
  }
  httplib::Result del(const std::string& path, const std::string& k) {
    return client().Delete(path.c_str(), key(k));
  }
};

TEST_F(Segments, CreateListDeleteWithinOneTenant) {
  start_with_keys();
  auto r = post("/v1/segments", {{"tokens", {1, 2, 3, 4, 5, 6, 7, 8}}, {"cache_salt", "s1"}}, key("ka"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json seg = json::parse(r->body);
  EXPECT_EQ(seg["object"], "segment");
  EXPECT_EQ(seg["tokens"], 8);
  EXPECT_EQ(seg["blocks"], 2);
  EXPECT_EQ(seg["cache_salt"], "s1");
  EXPECT_EQ(seg["evicted"], false);
  ASSERT_EQ(engine_.segment_specs.size(), 1u);
  EXPECT_EQ(engine_.segment_specs[0].tenant, "tenant-a");
  EXPECT_EQ(engine_.segment_specs[0].cache_salt, "s1");

  // Text is tokenized alone, without special tokens.
  r = post("/v1/segments", {{"text", "hello world hello world"}}, key("ka"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(engine_.segment_specs.back().tokens,
            engine_.tokenizer().encode("hello world hello world", false, true));
  EXPECT_TRUE(json::parse(r->body)["cache_salt"].is_null());

  auto list = get("/v1/segments", "ka");
  ASSERT_TRUE(list);
  ASSERT_EQ(list->status, 200);
  EXPECT_EQ(json::parse(list->body)["object"], "list");
  EXPECT_EQ(json::parse(list->body)["data"].size(), 2u);
  // The other tenant sees none and deletes none.
  list = get("/v1/segments", "kb");
  ASSERT_TRUE(list);
  EXPECT_TRUE(json::parse(list->body)["data"].empty());
  const std::string id = seg["id"];
  auto d = del("/v1/segments/" + id, "kb");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 404);
  EXPECT_EQ(json::parse(d->body)["error"]["code"], "segment_not_found");
  d = del("/v1/segments/" + id, "ka");
  ASSERT_TRUE(d);
  ASSERT_EQ(d->status, 200) << d->body;
  EXPECT_EQ(json::parse(d->body), (json{{"id", id}, {"object", "segment"}, {"deleted", true}}));
  d = del("/v1/segments/" + id, "ka");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 404);
  // No key: 401.
  auto anon = client().Get("/v1/segments");
  ASSERT_TRUE(anon);
  EXPECT_EQ(anon->status, 401);
}

TEST_F(Segments, BadBodiesNameTheField) {
  start();
  struct Case {
    std::string body;
    int status;
    const char* param;  // nullptr: not checked
  };
  const std::vector<Case> cases = {
      {"{not json", 400, nullptr},
      {"[1,2]", 400, nullptr},
      {"{}", 400, "text"},
      {R"({"text": ""})", 400, "text"},
      {R"({"text": 3})", 400, "text"},
      {R"({"text": "a", "tokens": [1,2,3,4]})", 400, "text"},
      {R"({"tokens": []})", 400, "tokens"},
      {R"({"tokens": "1,2"})", 400, "tokens"},
      {R"({"tokens": [1, -1, 2, 3]})", 400, "tokens"},
      {R"({"tokens": [1, 1000000, 2, 3]})", 400, "tokens"},
      {R"({"tokens": [1.5, 2, 3, 4]})", 400, "tokens"},
      {R"({"tokens": [1, 2]})", 400, "tokens"},  // the engine: shorter than a block
      {R"({"tokens": [1, 2, 3, 4], "cache_salt": ""})", 400, "cache_salt"},
      {R"({"tokens": [1, 2, 3, 4], "cache_salt": 7})", 400, "cache_salt"},
  };
  for (const Case& c : cases) {
    auto r = client().Post("/v1/segments", c.body, "application/json");
    ASSERT_TRUE(r) << c.body;
    EXPECT_EQ(r->status, c.status) << c.body << " -> " << r->body;
    const json e = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(e.contains("error")) << r->body;
    if (c.param) {
      EXPECT_EQ(e["error"]["param"], c.param) << c.body;
    }
  }
  // Over the context: 400 context_length_exceeded naming tokens.
  std::vector<int32_t> long_seg(200, 1);
  auto r = post("/v1/segments", {{"tokens", long_seg}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "tokens");
  EXPECT_TRUE(engine_.segment_specs.empty());
  // Engine states map as elsewhere: busy 429, draining 503.
  engine_.segment_error = make_error(ErrorCode::kResourceExhausted, "queue full");
  r = post("/v1/segments", {{"tokens", {1, 2, 3, 4}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  engine_.segment_error.reset();
  // Wrong methods.
  auto put = client().Put("/v1/segments", "{}", "application/json");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 405);
  auto g = client().Get("/v1/segments/seg-1");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 405);
  // Still serving.
  r = post("/v1/segments", {{"tokens", {1, 2, 3, 4}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

}  // namespace
}  // namespace agentkv::server
