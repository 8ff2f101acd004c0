// The fixture of the HTTP server tests: an HttpServer on an ephemeral port in
// front of a FakeServingEngine, and a client for it.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <string>
#include <vector>

#include "fake_serving_engine.h"
#include "server/http_server.h"

namespace agentkv::test {

// The JSON payloads of an SSE body, "[DONE]" kept as a string.
inline std::vector<nlohmann::json> parse_sse(const std::string& body) {
  std::vector<nlohmann::json> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    if (ev.empty()) continue;
    EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    const std::string data = ev.substr(6);
    out.push_back(data == "[DONE]" ? nlohmann::json("[DONE]") : nlohmann::json::parse(data));
  }
  return out;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void start(server::ServerConfig cfg = {}) {
    cfg.port = 0;
    cfg.model_name = "tiny";
    cfg.chat_template = "chatml";
    server_ = std::make_unique<server::HttpServer>(engine_, cfg);
    Result<int> port = server_->start();
    ASSERT_TRUE(port.is_ok()) << port.status().message();
    port_ = *port;
  }
  httplib::Client client() {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(5, 0);
    return c;
  }
  httplib::Result post(const std::string& path, const nlohmann::json& body, const httplib::Headers& h = {}) {
    return client().Post(path.c_str(), h, body.dump(), "application/json");
  }
  void TearDown() override {
    if (server_) server_->shutdown();
  }

  FakeServingEngine engine_;
  std::unique_ptr<server::HttpServer> server_;
  int port_ = 0;
};

}  // namespace agentkv::test
