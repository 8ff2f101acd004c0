// Multi-adapter serving over HTTP against FakeServingEngine: routing of
// `model`, kv_sharing, /v1/models, vLLM's load/unload endpoints, auth and the
// per-model / per-scheme metrics.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "http_server_test_util.h"

namespace agentkv::server {
namespace {

using json = nlohmann::json;
using test::HttpServerTest;

json error_of(const httplib::Result& r) { return json::parse(r->body)["error"]; }

// A lora dir with the adapter "files" the fake engine judges by name.
class LoraDir {
 public:
  LoraDir() {
    char tmpl[] = "/tmp/agentkv-lora-XXXXXX";
    path_ = std::filesystem::canonical(::mkdtemp(tmpl)).string();
    for (const char* d : {"sql", "inv", "other", "x", "garbage", "unreadable"}) {
      std::filesystem::create_directory(path_ + "/" + d);
    }
  }
  ~LoraDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

class HttpAdaptersTest : public HttpServerTest {
 protected:
  // Loading at run time enabled, from lora_.
  void start(ServerConfig cfg = {}) {
    cfg.enable_lora_loading = true;
    cfg.lora_dir = lora_.path();
    HttpServerTest::start(std::move(cfg));
  }
  void load(const std::string& name, const std::string& path, const std::string& kind = "") {
    ASSERT_TRUE(engine_.load_adapter(name, path, kind).is_ok());
  }
  LoraDir lora_;
  std::vector<std::string> model_ids() {
    auto r = client().Get("/v1/models");
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    std::vector<std::string> ids;
    const json list = json::parse(r->body);
    for (const json& m : list["data"]) ids.push_back(m["id"]);
    return ids;
  }
};

TEST_F(HttpAdaptersTest, ModelRoutesToTheBaseOrAnAdapter) {
  load("sql", "/adapters/sql");
  start();
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    const bool chat = std::string(path) == "/v1/chat/completions";
    json body = {{"max_tokens", 1}};
    if (chat) {
      body["messages"] = {{{"role", "user"}, {"content", "hi"}}};
    } else {
      body["prompt"] = "hi";
    }
    body["model"] = "tiny";
    auto base = post(path, body);
    ASSERT_TRUE(base);
    ASSERT_EQ(base->status, 200) << base->body;
    EXPECT_EQ(engine_.last_request().adapter, "");
    EXPECT_EQ(json::parse(base->body)["model"], "tiny");

    body["model"] = "sql";
    auto adapter = post(path, body);
    ASSERT_TRUE(adapter);
    ASSERT_EQ(adapter->status, 200) << adapter->body;
    EXPECT_EQ(engine_.last_request().adapter, "sql");
    EXPECT_EQ(json::parse(adapter->body)["model"], "sql");  // the response names what answered

    body.erase("model");
    auto absent = post(path, body);
    ASSERT_TRUE(absent);
    ASSERT_EQ(absent->status, 200) << absent->body;
    EXPECT_EQ(engine_.last_request().adapter, "");

    body["model"] = "nope";
    auto unknown = post(path, body);
    ASSERT_TRUE(unknown);
    EXPECT_EQ(unknown->status, 404);
    const json e = error_of(unknown);
    EXPECT_EQ(e["code"], "model_not_found");
    EXPECT_EQ(e["param"], "model");
    const std::string msg = e["message"];
    EXPECT_NE(msg.find("'nope'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'tiny', 'sql'"), std::string::npos) << msg;  // what is served instead
  }
}

TEST_F(HttpAdaptersTest, StreamedAdapterResponseNamesTheAdapter) {
  load("sql", "/adapters/sql");
  start();
  auto r = post("/v1/completions", {{"model", "sql"}, {"prompt", "hi"}, {"max_tokens", 2}, {"stream", true}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const auto ev = test::parse_sse(r->body);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[0]["model"], "sql");
}

TEST_F(HttpAdaptersTest, RoutingFollowsLoadsAndUnloadsAtRunTime) {
  start();
  const json body = {{"model", "late"}, {"prompt", "hi"}, {"max_tokens", 1}};
  auto before = post("/v1/completions", body);
  ASSERT_TRUE(before);
  EXPECT_EQ(before->status, 404);
  load("late", "/adapters/late");
  auto during = post("/v1/completions", body);
  ASSERT_TRUE(during);
  EXPECT_EQ(during->status, 200) << during->body;
  ASSERT_TRUE(engine_.unload_adapter("late").is_ok());
  auto after = post("/v1/completions", body);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 404);
  EXPECT_EQ(error_of(after)["code"], "model_not_found");
}

TEST_F(HttpAdaptersTest, AdapterGoneAtSubmitIs404) {
  load("sql", "/adapters/sql");
  start();
  // The race: routing saw the adapter, the engine has unloaded it by submit.
  engine_.submit_error = Status(ErrorCode::kNotFound, "no adapter named 'sql'");
  auto r = post("/v1/completions", {{"model", "sql"}, {"prompt", "hi"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  const json e = error_of(r);
  EXPECT_EQ(e["code"], "model_not_found");
  EXPECT_EQ(e["param"], "model");
  EXPECT_NE(e["message"].get<std::string>().find("'sql'"), std::string::npos);
}

TEST_F(HttpAdaptersTest, KvSharingIsPassedThroughOrRefused) {
  start();
  for (const char* scheme : {"none", "alora", "icarus"}) {
    auto r = post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 1}, {"kv_sharing", scheme}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(engine_.last_request().kv_sharing, scheme);
    auto c = post("/v1/chat/completions",
                  {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 1}, {"kv_sharing", scheme}});
    ASSERT_TRUE(c);
    EXPECT_EQ(c->status, 200) << c->body;
    EXPECT_EQ(engine_.last_request().kv_sharing, scheme);
  }
  auto absent = post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 1}});
  ASSERT_TRUE(absent);
  EXPECT_EQ(absent->status, 200);
  EXPECT_EQ(engine_.last_request().kv_sharing, "");  // the engine's default
  // A composition: "exact+reuse", a list of the two, or the object's "reuse"; kept as "exact+reuse".
  for (const json& composed :
       {json("alora+sparsex"), json("sparsex+alora"), json::array({"alora", "sparsex"}),
        json({{"scheme", "alora"}, {"reuse", "sparsex"}, {"ratio", 0.5}})}) {
    auto r = post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 1}, {"kv_sharing", composed}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << composed.dump() << " " << r->body;
    const std::string sent = engine_.last_request().kv_sharing;
    EXPECT_TRUE(sent == "alora+sparsex" || sent == "sparsex+alora") << sent;
  }
  EXPECT_EQ(engine_.last_request().kv_sharing_params.ratio, 0.5);
  // Pairs that do not compose say why.
  for (const auto& [bad, why] : std::vector<std::pair<json, std::string>>{
           {json("sparsex+cacheblend"), "two segment-reuse schemes"},
           {json::array({"lragent-base", "icarus"}), "two exact schemes"},
           {json("full+sparsex"), "does not compose"},
           {json({{"scheme", "cacheblend"}, {"reuse", "naive"}}), "two segment-reuse schemes"}}) {
    auto r = post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 1}, {"kv_sharing", bad}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad.dump();
    EXPECT_NE(error_of(r)["message"].get<std::string>().find(why), std::string::npos) << r->body;
  }
  const size_t n = engine_.submitted_requests().size();
  for (const json& bad :
       {json("fullshared"), json("ICARUS"), json(""), json(3), json(true), json::array({"alora"}),
        json::array({"alora", "sparsex", "naive"}), json::array({"alora", 3}), json::object()}) {
    for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
      json body = {{"kv_sharing", bad}, {"prompt", "hi"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
      auto r = post(path, body);
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 400) << bad.dump() << " " << r->body;
      // An object without "scheme" names the missing member.
      EXPECT_EQ(error_of(r)["param"], bad.is_object() ? "kv_sharing.scheme" : "kv_sharing") << bad.dump();
      EXPECT_EQ(error_of(r)["type"], "invalid_request_error");
    }
  }
  EXPECT_EQ(engine_.submitted_requests().size(), n);  // none reached the engine
  // The object form carries the scheme's parameters to the engine, which checks their ranges.
  auto obj = post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 1},
                                      {"kv_sharing", {{"scheme", "cacheblend"}, {"ratio", 0.25}, {"check_layer", 2}}}});
  ASSERT_TRUE(obj);
  EXPECT_EQ(obj->status, 200) << obj->body;
  EXPECT_EQ(engine_.last_request().kv_sharing, "cacheblend");
  EXPECT_EQ(engine_.last_request().kv_sharing_params.ratio, 0.25);
  EXPECT_EQ(engine_.last_request().kv_sharing_params.check_layer, 2);
  EXPECT_FALSE(engine_.last_request().kv_sharing_params.recompute_tokens.has_value());
}

TEST_F(HttpAdaptersTest, ModelsListsTheBaseThenAdapters) {
  load("b-sql", "/adapters/sql", "alora");
  load("a-chat", "/adapters/chat");
  load("c-sql-again", "/adapters/sql", "icarus");
  start();
  auto r = client().Get("/v1/models");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const json data = json::parse(r->body)["data"];
  ASSERT_EQ(data.size(), 4u);
  EXPECT_EQ(data[0]["id"], "tiny");
  EXPECT_EQ(data[0]["kind"], "base");
  EXPECT_EQ(data[0]["object"], "model");
  EXPECT_EQ(data[0]["owned_by"], "agentkv");
  EXPECT_EQ(data[0]["max_model_len"], 128);
  EXPECT_FALSE(data[0].contains("parent"));
  const std::vector<std::pair<std::string, std::string>> want = {
      {"a-chat", "lora"}, {"b-sql", "alora"}, {"c-sql-again", "icarus"}};
  for (size_t i = 0; i < want.size(); ++i) {
    const json& m = data[i + 1];
    EXPECT_EQ(m["id"], want[i].first);
    EXPECT_EQ(m["kind"], want[i].second);
    EXPECT_EQ(m["object"], "model");
    EXPECT_EQ(m["owned_by"], "agentkv");
    EXPECT_EQ(m["parent"], "tiny");
    EXPECT_TRUE(m["adapter_id"].is_string() && !m["adapter_id"].get<std::string>().empty());
  }
  // Same files, same identity.
  EXPECT_EQ(data[2]["adapter_id"], data[3]["adapter_id"]);
  EXPECT_NE(data[1]["adapter_id"], data[2]["adapter_id"]);
}

TEST_F(HttpAdaptersTest, LoadAndUnloadAsVllm) {
  start();
  auto loaded = post("/v1/load_lora_adapter", {{"lora_name", "sql"}, {"lora_path", "sql"}});
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->status, 200) << loaded->body;
  EXPECT_EQ(loaded->body, "Success: LoRA adapter 'sql' added successfully.");
  EXPECT_EQ(loaded->get_header_value("Content-Type").rfind("text/plain", 0), 0u);
  // The engine gets the path resolved inside the lora dir.
  EXPECT_EQ(engine_.load_calls(), std::vector<std::string>{"sql=" + (lora_ / "sql") + ":"});
  EXPECT_EQ(model_ids(), (std::vector<std::string>{"tiny", "sql"}));

  auto with_kind =
      post("/v1/load_lora_adapter", {{"lora_name", "inv"}, {"lora_path", lora_ / "inv"}, {"kind", "alora"}});
  ASSERT_TRUE(with_kind);
  EXPECT_EQ(with_kind->status, 200) << with_kind->body;
  EXPECT_EQ(engine_.load_calls().back(), "inv=" + (lora_ / "inv") + ":alora");  // an absolute path inside

  auto unloaded = post("/v1/unload_lora_adapter", {{"lora_name", "sql"}});
  ASSERT_TRUE(unloaded);
  EXPECT_EQ(unloaded->status, 200) << unloaded->body;
  EXPECT_EQ(unloaded->body, "Success: LoRA adapter 'sql' removed successfully.");
  EXPECT_EQ(model_ids(), (std::vector<std::string>{"tiny", "inv"}));

  // A name is free again once unloaded.
  auto again = post("/v1/load_lora_adapter", {{"lora_name", "sql"}, {"lora_path", "other"}});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
}

TEST_F(HttpAdaptersTest, LoadErrors) {
  load("sql", "/adapters/sql");
  start();
  struct Case {
    const char* what;
    json body;
    int status;
    std::string param;  // "" = null
    std::string code;   // "" = null
  };
  const std::vector<Case> cases = {
      {"no name", {{"lora_path", "/a"}}, 400, "lora_name", ""},
      {"no path", {{"lora_name", "x"}}, 400, "lora_path", ""},
      {"empty name", {{"lora_name", ""}, {"lora_path", "/a"}}, 400, "lora_name", ""},
      {"null path", {{"lora_name", "x"}, {"lora_path", nullptr}}, 400, "lora_path", ""},
      {"name not a string", {{"lora_name", 3}, {"lora_path", "/a"}}, 400, "lora_name", ""},
      {"path not a string", {{"lora_name", "x"}, {"lora_path", {"/a"}}}, 400, "lora_path", ""},
      {"bad kind", {{"lora_name", "x"}, {"lora_path", "/a"}, {"kind", "qlora"}}, 400, "kind", ""},
      {"kind not a string", {{"lora_name", "x"}, {"lora_path", "/a"}, {"kind", 1}}, 400, "kind", ""},
      {"already loaded", {{"lora_name", "sql"}, {"lora_path", "/adapters/sql"}}, 400, "lora_name", ""},
      {"the base's name", {{"lora_name", "tiny"}, {"lora_path", "/a"}}, 400, "lora_name", ""},
      {"not an adapter", {{"lora_name", "x"}, {"lora_path", "garbage"}}, 400, "lora_path", ""},
      {"unreadable", {{"lora_name", "x"}, {"lora_path", "unreadable"}}, 400, "lora_path", ""},
      {"no adapter there",
       {{"lora_name", "x"}, {"lora_path", "missing"}},
       404,
       "lora_path",
       "adapter_not_found"},
      {"outside the lora dir", {{"lora_name", "x"}, {"lora_path", "/etc/passwd"}}, 400, "lora_path", ""},
      {"dot-dot", {{"lora_name", "x"}, {"lora_path", "../etc/passwd"}}, 400, "lora_path", ""},
  };
  for (const Case& c : cases) {
    auto r = post("/v1/load_lora_adapter", c.body);
    ASSERT_TRUE(r) << c.what;
    EXPECT_EQ(r->status, c.status) << c.what << ": " << r->body;
    const json e = error_of(r);
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << c.what;
    EXPECT_EQ(e["type"], "invalid_request_error") << c.what;
    EXPECT_EQ(e["param"], c.param.empty() ? json(nullptr) : json(c.param)) << c.what;
    EXPECT_EQ(e["code"], c.code.empty() ? json(nullptr) : json(c.code)) << c.what;
  }
  EXPECT_EQ(error_of(post("/v1/load_lora_adapter", {{"lora_name", "sql"}, {"lora_path", "/b"}}))["message"],
            "The lora adapter 'sql' has already been loaded.");
  EXPECT_EQ(error_of(post("/v1/load_lora_adapter", {{"lora_path", "/b"}}))["message"],
            "Both 'lora_name' and 'lora_path' must be provided.");
  // The loader's own message (it may quote the file) stays in the server.
  const std::string garbage =
      error_of(post("/v1/load_lora_adapter", {{"lora_name", "x"}, {"lora_path", "garbage"}}))["message"];
  EXPECT_EQ(garbage.find(": not an adapter"), std::string::npos) << garbage;  // the fake loader's words
  EXPECT_EQ(garbage.find(lora_.path()), std::string::npos) << garbage;
  EXPECT_NE(garbage.find("server log"), std::string::npos) << garbage;
  auto bad_json = client().Post("/v1/load_lora_adapter", "{\"lora_name\": ", "application/json");
  ASSERT_TRUE(bad_json);
  EXPECT_EQ(bad_json->status, 400);
  auto dup = client().Post("/v1/load_lora_adapter", R"({"lora_name":"a","lora_name":"b","lora_path":"/p"})",
                           "application/json");
  ASSERT_TRUE(dup);
  EXPECT_EQ(dup->status, 400);
  EXPECT_EQ(error_of(dup)["param"], "lora_name");
  // Nothing failed half way: only the adapter loaded before start is served.
  EXPECT_EQ(model_ids(), (std::vector<std::string>{"tiny", "sql"}));
  EXPECT_TRUE(engine_.load_calls().size() == 1u);
}

TEST_F(HttpAdaptersTest, UnloadErrors) {
  start();
  auto unknown = post("/v1/unload_lora_adapter", {{"lora_name", "ghost"}});
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(error_of(unknown)["message"], "The lora adapter 'ghost' cannot be found.");
  EXPECT_EQ(error_of(unknown)["param"], "lora_name");
  EXPECT_EQ(error_of(unknown)["code"], "model_not_found");
  auto base = post("/v1/unload_lora_adapter", {{"lora_name", "tiny"}});
  ASSERT_TRUE(base);
  EXPECT_EQ(base->status, 404);  // the base is no adapter
  auto missing = post("/v1/unload_lora_adapter", json::object());
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 400);
  EXPECT_EQ(error_of(missing)["param"], "lora_name");
  auto wrong_type = post("/v1/unload_lora_adapter", {{"lora_name", json::array()}});
  ASSERT_TRUE(wrong_type);
  EXPECT_EQ(wrong_type->status, 400);
  auto not_object = client().Post("/v1/unload_lora_adapter", "[1]", "application/json");
  ASSERT_TRUE(not_object);
  EXPECT_EQ(not_object->status, 400);
  auto method = client().Get("/v1/unload_lora_adapter");
  ASSERT_TRUE(method);
  EXPECT_EQ(method->status, 405);
  EXPECT_EQ(method->get_header_value("Allow"), "POST");
}

TEST_F(HttpAdaptersTest, AdapterEndpointsNeedAKey) {
  ServerConfig cfg;
  cfg.api_keys = {{"k1", "tenant-a"}, {"plain", "tenant-b"}};
  cfg.admin_api_keys = {"k1"};
  start(cfg);
  const json load_body = {{"lora_name", "sql"}, {"lora_path", "sql"}};
  auto none = post("/v1/load_lora_adapter", load_body);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(error_of(none)["code"], "invalid_api_key");
  auto wrong = post("/v1/load_lora_adapter", load_body, {{"Authorization", "Bearer k2"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_TRUE(engine_.load_calls().empty());
  // A valid key that is not an admin key: 403, for loading and unloading.
  auto plain = post("/v1/load_lora_adapter", load_body, {{"Authorization", "Bearer plain"}});
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 403) << plain->body;
  EXPECT_EQ(error_of(plain)["code"], "insufficient_permissions");
  EXPECT_TRUE(engine_.load_calls().empty());
  auto ok = post("/v1/load_lora_adapter", load_body, {{"Authorization", "Bearer k1"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;

  auto unload_none = post("/v1/unload_lora_adapter", {{"lora_name", "sql"}});
  ASSERT_TRUE(unload_none);
  EXPECT_EQ(unload_none->status, 401);
  auto unload_plain =
      post("/v1/unload_lora_adapter", {{"lora_name", "sql"}}, {{"Authorization", "Bearer plain"}});
  ASSERT_TRUE(unload_plain);
  EXPECT_EQ(unload_plain->status, 403);
  // The plain key still serves completions.
  auto completion =
      post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 1}}, {{"Authorization", "Bearer plain"}});
  ASSERT_TRUE(completion);
  EXPECT_EQ(completion->status, 200) << completion->body;
  auto unload_ok = post("/v1/unload_lora_adapter", {{"lora_name", "sql"}}, {{"Authorization", "Bearer k1"}});
  ASSERT_TRUE(unload_ok);
  EXPECT_EQ(unload_ok->status, 200) << unload_ok->body;
}

TEST(HttpAdaptersLifecycle, AdapterEndpointsAre503WhileLoadingAndDraining) {
  LoraDir lora;
  ServerConfig cfg;
  cfg.port = 0;
  cfg.model_name = "tiny";
  cfg.chat_template = "chatml";
  cfg.enable_lora_loading = true;
  cfg.lora_dir = lora.path();
  HttpServer server(cfg);
  Result<int> port = server.start();
  ASSERT_TRUE(port.is_ok());
  httplib::Client c("127.0.0.1", *port);
  const std::string body = R"({"lora_name":"sql","lora_path":"sql"})";
  auto loading = c.Post("/v1/load_lora_adapter", body, "application/json");
  ASSERT_TRUE(loading);
  EXPECT_EQ(loading->status, 503);
  EXPECT_EQ(json::parse(loading->body)["error"]["code"], "unavailable");
  auto models = c.Get("/v1/models");  // the base is known before the engine is
  ASSERT_TRUE(models);
  ASSERT_EQ(models->status, 200);
  EXPECT_EQ(json::parse(models->body)["data"].size(), 1u);
  EXPECT_EQ(json::parse(models->body)["data"][0]["kind"], "base");

  test::FakeServingEngine engine;
  ASSERT_TRUE(server.attach(engine).is_ok());
  auto ok = c.Post("/v1/load_lora_adapter", body, "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  server.shutdown();
}

TEST_F(HttpAdaptersTest, AdapterEndpointsAre503WhileDraining) {
  load("sql", "/adapters/sql");
  engine_.tokens_per_request = 60;
  engine_.tick = std::chrono::milliseconds(10);  // a stream of ~0.6 s keeps the drain going
  start();
  auto stream = std::async(std::launch::async, [&] {
    return post("/v1/completions", {{"prompt", "hello"}, {"max_tokens", 100}, {"stream", true}});
  });
  while (engine_.n_active() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto stopper = std::async(std::launch::async, [&] { server_->shutdown(); });
  while (!server_->draining()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto load_r = post("/v1/load_lora_adapter", {{"lora_name", "x"}, {"lora_path", "x"}});
  ASSERT_TRUE(load_r);
  EXPECT_EQ(load_r->status, 503);
  EXPECT_EQ(error_of(load_r)["code"], "unavailable");
  auto unload_r = post("/v1/unload_lora_adapter", {{"lora_name", "sql"}});
  ASSERT_TRUE(unload_r);
  EXPECT_EQ(unload_r->status, 503);
  EXPECT_EQ(engine_.models().size(), 2u);  // nothing changed
  auto r = stream.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  stopper.get();
}

TEST_F(HttpAdaptersTest, PerModelAndPerSchemeMetrics) {
  load("sql", "/adapters/sql");
  load("idle", "/adapters/idle");
  engine_.set_stats({{"", {5, 100, 32, 40}}, {"sql", {2, 30, 16, 9}}},
                    {{"none", 32}, {"alora", 16}}, {{"none", 100}, {"alora", 30}});
  start();
  auto m = client().Get("/metrics");
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200);
  const std::string& t = m->body;
  for (const char* line : {
           "agentkv_model_requests_total{model=\"tiny\"} 5\n",
           "agentkv_model_prompt_tokens_total{model=\"tiny\"} 100\n",
           "agentkv_model_cached_tokens_total{model=\"tiny\"} 32\n",
           "agentkv_model_completion_tokens_total{model=\"tiny\"} 40\n",
           "agentkv_model_requests_total{model=\"sql\"} 2\n",
           "agentkv_model_prompt_tokens_total{model=\"sql\"} 30\n",
           "agentkv_model_cached_tokens_total{model=\"sql\"} 16\n",
           "agentkv_model_completion_tokens_total{model=\"sql\"} 9\n",
           "agentkv_model_requests_total{model=\"idle\"} 0\n",  // served, no requests yet
           "agentkv_scheme_cached_tokens_total{scheme=\"none\"} 32\n",
           "agentkv_scheme_cached_tokens_total{scheme=\"alora\"} 16\n",
           "agentkv_scheme_cached_tokens_total{scheme=\"icarus\"} 0\n",
           "agentkv_scheme_prompt_tokens_total{scheme=\"none\"} 100\n",
           "agentkv_scheme_prompt_tokens_total{scheme=\"alora\"} 30\n",
           "# TYPE agentkv_model_requests_total counter\n",
           "# TYPE agentkv_scheme_cached_tokens_total counter\n",
       }) {
    EXPECT_NE(t.find(line), std::string::npos) << line << t;
  }
  EXPECT_EQ(t.find("model=\"\""), std::string::npos) << t;  // the base goes by its served name

  // Totals grow; a second scrape reports them, not their sum with the first.
  engine_.set_stats({{"", {6, 110, 32, 41}}, {"sql", {2, 30, 16, 9}}}, {{"none", 40}}, {{"none", 110}});
  auto again = client().Get("/metrics");
  ASSERT_TRUE(again);
  EXPECT_NE(again->body.find("agentkv_model_requests_total{model=\"tiny\"} 6\n"), std::string::npos);
  EXPECT_NE(again->body.find("agentkv_model_prompt_tokens_total{model=\"tiny\"} 110\n"), std::string::npos);
  EXPECT_NE(again->body.find("agentkv_scheme_cached_tokens_total{scheme=\"none\"} 40\n"), std::string::npos);
  // A scheme missing from a later snapshot keeps its count.
  EXPECT_NE(again->body.find("agentkv_scheme_cached_tokens_total{scheme=\"alora\"} 16\n"), std::string::npos);
}

TEST_F(HttpAdaptersTest, MetricLabelValuesAreEscaped) {
  const std::string odd = "we\"ird\\na\nme";
  engine_.set_stats({{odd, {1, 2, 3, 4}}}, {}, {});
  start();
  auto m = client().Get("/metrics");
  ASSERT_TRUE(m);
  const std::string want = "agentkv_model_requests_total{model=\"we\\\"ird\\\\na\\nme\"} 1\n";
  EXPECT_NE(m->body.find(want), std::string::npos) << m->body;
  // Every sample is one line: the raw newline never reaches the output.
  EXPECT_EQ(m->body.find("a\nme"), std::string::npos);
}

}  // namespace
}  // namespace agentkv::server

namespace agentkv::server {
namespace {

using json = nlohmann::json;
using test::HttpServerTest;

TEST_F(HttpServerTest, AdapterEndpointsAre404UnlessEnabled) {
  ServerConfig cfg;
  cfg.api_keys = {{"k1", "t"}};
  cfg.admin_api_keys = {"k1"};
  start(cfg);
  for (const char* path : {"/v1/load_lora_adapter", "/v1/unload_lora_adapter"}) {
    for (const httplib::Headers& h : {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer k1"}}}) {
      auto r = post(path, {{"lora_name", "sql"}, {"lora_path", "/etc/passwd"}}, h);
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 404) << path << ": " << r->body;
      const json e = json::parse(r->body)["error"];
      EXPECT_EQ(e["code"], "not_found");
      EXPECT_NE(e["message"].get<std::string>().find("--enable-lora-loading"), std::string::npos);
    }
  }
  EXPECT_TRUE(engine_.load_calls().empty());
}

}  // namespace
}  // namespace agentkv::server
