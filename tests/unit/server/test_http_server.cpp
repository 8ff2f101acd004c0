// The HTTP server end to end over a real socket, against FakeServingEngine.
#include <gtest/gtest.h>
#include <httplib.h>

#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "http_server_test_util.h"

namespace agentkv::server {
namespace {

using json = nlohmann::json;
using test::FakeServingEngine;
using test::HttpServerTest;
using test::parse_sse;

TEST_F(HttpServerTest, CompletionNonStreamed) {
  start();
  auto r = post("/v1/completions", {{"model", "tiny"},
                                    {"prompt", "hello"},
                                    {"max_tokens", 3},
                                    {"seed", 7},
                                    {"stop", {"zz"}},
                                    {"cache_salt", "s1"},
                                    {"temperature", 0.5}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["text"], engine_.script_text(3));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  const auto reqs = engine_.submitted_requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].prompt, engine_.tokenizer().encode("hello", true, false));
  EXPECT_EQ(reqs[0].max_tokens, 3);
  EXPECT_EQ(reqs[0].sampling.seed, 7u);
  EXPECT_FLOAT_EQ(reqs[0].sampling.temperature, 0.5f);
  EXPECT_EQ(reqs[0].stop, std::vector<std::string>{"zz"});
  EXPECT_EQ(reqs[0].cache_salt, "s1");
  EXPECT_EQ(reqs[0].tenant, "");
  EXPECT_EQ(j["usage"]["prompt_tokens"], reqs[0].prompt.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
}

TEST_F(HttpServerTest, MaxTokensDefaultsToTheContextAndModelMayBeOmitted) {
  start();
  auto r = post("/v1/completions", {{"prompt", "hello"}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(engine_.submitted_requests().at(0).max_tokens, 128);
}

TEST_F(HttpServerTest, CompletionLogprobs) {
  start();
  auto r = post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 2}, {"logprobs", 1}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json lp = json::parse(r->body)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 2u);
  EXPECT_EQ(lp["tokens"][1], engine_.script_text(2).substr(engine_.script_text(1).size()));
  EXPECT_FLOAT_EQ(lp["token_logprobs"][0].get<float>(), -0.5f);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 1u);
  EXPECT_EQ(engine_.submitted_requests().at(0).sampling.n_logprobs, 1);
}

TEST_F(HttpServerTest, ChatNonStreamedWithLogprobs) {
  start();
  auto r = post("/v1/chat/completions", {{"model", "tiny"},
                                         {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                         {"max_tokens", 2},
                                         {"logprobs", true},
                                         {"top_logprobs", 2}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], engine_.script_text(2));
  ASSERT_EQ(j["choices"][0]["logprobs"]["content"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  // The prompt went through the ChatML template with the generation prompt.
  const std::vector<agentkv::ChatMessage> msgs = {{"user", "hi"}};
  const std::string text = chat_template_apply(ChatTemplateKind::kChatml, msgs, true);
  EXPECT_EQ(engine_.submitted_requests().at(0).prompt, engine_.tokenizer().encode(text, true, true));
}

TEST_F(HttpServerTest, CompletionStreamed) {
  engine_.tokens_per_request = 10;  // max_tokens ends it
  start();
  auto r = post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 4}, {"stream", true}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<json> ev = parse_sse(r->body);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    EXPECT_EQ(ev[i]["object"], "text_completion");
    text += ev[i]["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, engine_.script_text(4));
  EXPECT_EQ(ev[ev.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(ev[0]["choices"][0]["finish_reason"].is_null() || ev.size() == 2);
}

TEST_F(HttpServerTest, ChatStreamedWithUsage) {
  start();
  auto r = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                         {"max_tokens", 3},
                                         {"stream", true},
                                         {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const std::vector<json> ev = parse_sse(r->body);
  ASSERT_GE(ev.size(), 4u);
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(ev.back(), "[DONE]");
  const json& usage = ev[ev.size() - 2];
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
  EXPECT_EQ(ev[ev.size() - 3]["choices"][0]["finish_reason"], "length");
  std::string text;
  for (size_t i = 1; i + 3 < ev.size(); ++i)
    text += ev[i]["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_EQ(text, engine_.script_text(3));
  for (size_t i = 0; i + 1 < ev.size(); ++i) EXPECT_EQ(ev[i]["id"], ev[0]["id"]);
}

TEST_F(HttpServerTest, ApiKeys) {
  ServerConfig cfg;
  cfg.api_keys = {{"k1", "tenant-a"}};
  start(cfg);
  const json body = {{"prompt", "hello"}, {"max_tokens", 1}};
  auto none = post("/v1/completions", body);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(json::parse(none->body)["error"]["code"], "invalid_api_key");
  auto wrong = post("/v1/completions", body, {{"Authorization", "Bearer nope"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto models = client().Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  auto ok = post("/v1/completions", body, {{"Authorization", "Bearer k1"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(engine_.submitted_requests().at(0).tenant, "tenant-a");
  auto health = client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
}

TEST_F(HttpServerTest, RequestErrors) {
  start();
  auto unknown_model = post("/v1/completions", {{"model", "gpt-4"}, {"prompt", "x"}});
  ASSERT_TRUE(unknown_model);
  EXPECT_EQ(unknown_model->status, 404);
  EXPECT_EQ(json::parse(unknown_model->body)["error"]["code"], "model_not_found");

  auto bad_json = client().Post("/v1/completions", "{\"prompt\": ", "application/json");
  ASSERT_TRUE(bad_json);
  EXPECT_EQ(bad_json->status, 400);
  EXPECT_EQ(json::parse(bad_json->body)["error"]["type"], "invalid_request_error");

  auto sharing = post("/v1/completions", {{"prompt", "x"}, {"kv_sharing", "prefix"}});
  ASSERT_TRUE(sharing);
  EXPECT_EQ(sharing->status, 400);
  EXPECT_EQ(json::parse(sharing->body)["error"]["param"], "kv_sharing");
  auto none = post("/v1/completions", {{"prompt", "x"}, {"kv_sharing", "none"}, {"max_tokens", 1}});
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 200);

  auto route = client().Get("/v2/nothing");
  ASSERT_TRUE(route);
  EXPECT_EQ(route->status, 404);
  EXPECT_EQ(json::parse(route->body)["error"]["code"], "not_found");
  auto method = client().Get("/v1/completions");
  ASSERT_TRUE(method);
  EXPECT_EQ(method->status, 405);
  EXPECT_TRUE(json::parse(method->body).contains("error"));
}

TEST_F(HttpServerTest, SubmitErrorsMapToStatuses) {
  start();
  const json body = {{"prompt", "hello"}};
  const std::vector<std::pair<ErrorCode, int>> cases = {{ErrorCode::kResourceExhausted, 429},
                                                        {ErrorCode::kOutOfRange, 400},
                                                        {ErrorCode::kInvalidArgument, 400},
                                                        {ErrorCode::kUnavailable, 503},
                                                        {ErrorCode::kInternal, 500}};
  for (const auto& [code, status] : cases) {
    engine_.submit_error = Status(code, "nope");
    auto r = post("/v1/completions", body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["message"], "nope");
    if (code == ErrorCode::kOutOfRange) {
      EXPECT_EQ(e["code"], "context_length_exceeded");
    }
  }
}

TEST_F(HttpServerTest, OversizedBodyIs413) {
  start();
  const std::string big(10u << 20, ' ');
  auto r = client().Post("/v1/completions", "{\"prompt\": \"x\"" + big + "}", "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "request_too_large");
  // The server is still fine.
  auto h = client().Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

TEST_F(HttpServerTest, ModelsHealthMetrics) {
  start();
  auto models = client().Get("/v1/models");
  ASSERT_TRUE(models);
  ASSERT_EQ(models->status, 200);
  const json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["owned_by"], "agentkv");
  EXPECT_EQ(m["data"][0]["max_model_len"], 128);

  auto health = client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");

  ASSERT_TRUE(post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 3}}));
  auto metrics = client().Get("/metrics");
  ASSERT_TRUE(metrics);
  ASSERT_EQ(metrics->status, 200);
  const std::string& t = metrics->body;
  EXPECT_NE(t.find("agentkv_requests_total{status=\"200\"} "), std::string::npos) << t;
  EXPECT_NE(t.find("agentkv_ttft_seconds_count 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("agentkv_inter_token_seconds_count 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("agentkv_decode_seconds_count 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("agentkv_kv_blocks{state=\"used\"} 7\n"), std::string::npos) << t;
  EXPECT_NE(t.find("agentkv_requests_waiting 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("agentkv_prefix_hit_tokens_total 42\n"), std::string::npos) << t;
  EXPECT_NE(t.find("agentkv_preemptions_total 3\n"), std::string::npos) << t;
  // A second scrape does not add the engine's totals again.
  auto again = client().Get("/metrics");
  ASSERT_TRUE(again);
  EXPECT_NE(again->body.find("agentkv_prefix_hit_tokens_total 42\n"), std::string::npos);
}

TEST_F(HttpServerTest, ClientDisconnectCancelsStream) {
  engine_.tokens_per_request = -1;  // until cancelled
  start();
  httplib::Client c = client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = json{{"prompt", "hello"}, {"stream", true}}.dump();
  req.set_header("Content-Type", "application/json");
  int chunks = 0;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 2; };
  httplib::Response res;
  httplib::Error err;
  EXPECT_FALSE(c.send(req, res, err));  // we hung up
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (engine_.cancelled_ids().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine_.cancelled_ids(), std::vector<ServeId>{1});
  while (engine_.n_active() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine_.n_active(), 0u);
}

TEST_F(HttpServerTest, DrainFinishesStreamsAndRefusesNewWork) {
  engine_.tokens_per_request = 60;
  engine_.tick = std::chrono::milliseconds(10);  // a stream of ~0.6 s
  start();
  auto stream = std::async(std::launch::async, [&] {
    return post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 100}, {"stream", true}});
  });
  while (engine_.n_active() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto stopper = std::async(std::launch::async, [&] { server_->shutdown(); });
  while (!server_->draining()) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  auto refused = post("/v1/completions", {{"prompt", "hello"}});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(json::parse(refused->body)["error"]["code"], "unavailable");
  auto health = client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(json::parse(health->body)["status"], "draining");

  auto r = stream.get();
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const std::vector<json> ev = parse_sse(r->body);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev.back(), "[DONE]");
  EXPECT_EQ(ev[ev.size() - 2]["choices"][0]["finish_reason"], "length");
  std::string text;
  for (size_t i = 0; i + 1 < ev.size(); ++i) text += ev[i]["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, engine_.script_text(60));
  stopper.get();
  EXPECT_FALSE(client().Get("/health"));  // the listener is gone
}

TEST(HttpServerLoading, HealthIs503UntilAnEngineIsAttached) {
  ServerConfig cfg;
  cfg.port = 0;
  cfg.chat_template = "chatml";
  HttpServer server(cfg);
  Result<int> port = server.start();
  ASSERT_TRUE(port.is_ok());
  httplib::Client c("127.0.0.1", *port);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  EXPECT_EQ(json::parse(h->body)["status"], "loading");
  auto p = c.Post("/v1/completions", "{\"prompt\":\"x\"}", "application/json");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 503);
  FakeServingEngine engine;
  ASSERT_TRUE(server.attach(engine).is_ok());
  auto h2 = c.Get("/health");
  ASSERT_TRUE(h2);
  EXPECT_EQ(h2->status, 200);
  server.shutdown();
}

TEST(HttpServerConfig, BadChatTemplateNameIsAnError) {
  ServerConfig cfg;
  cfg.chat_template = "jinja-magic";
  HttpServer server(cfg);
  FakeServingEngine engine;
  const Status st = server.attach(engine);
  EXPECT_FALSE(st.is_ok());
}

}  // namespace
}  // namespace agentkv::server
