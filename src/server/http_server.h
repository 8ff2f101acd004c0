// The OpenAI-compatible HTTP server: cpp-httplib in front of a ServingEngine.
//
//   POST /v1/completions, /v1/chat/completions   (JSON or SSE stream)
//   GET  /v1/models, /health, /metrics
//   POST /v1/load_lora_adapter, /v1/unload_lora_adapter   (as vLLM)
//
// A request's `model` names the base (ServerConfig::model_name) or an adapter
// the engine serves (see models_handler.h).
//
// Every error is OpenAI's {"error":{...}} body. Each connection has a thread
// (the handler of a request blocks it while the engine delivers events to a
// per-request queue), started on demand up to ServerConfig::connections'
// max_connections; past that a new connection gets 503 at once. Idle and slow
// connections are bounded by deadlines (see connection_server.h).
//
// Lifecycle: start() binds and listens; attach() hands over the engine (until
// then POSTs and /health answer 503, so the port is up while the model loads);
// shutdown() stops accepting work, lets the engine drain, waits for responses
// that are still being written, then stops the listener.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "agentkv/serving.h"
#include "grammar/grammar_cache.h"
#include "server/connection_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/tool_format.h"
#include "tokenizer/chat_renderer.h"
#include "util/status.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace agentkv::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                              // 0: an ephemeral port (see HttpServer::port())
  std::string model_name = "agentkv";           // the base model's name (adapters go by their own)
  std::map<std::string, std::string> api_keys;  // bearer key -> tenant; empty: no auth, tenant ""
  std::string chat_template;                    // chatml | llama3 | mistral | a .jinja path; empty: the model file's
  std::string tool_format;                      // hermes | llama3 | mistral; empty: from the model file
  bool bare_tool_calls = true;                  // auto + hermes: bare {"name": "TOOL" JSON is a call too
  double shutdown_timeout_s = 30;               // how long shutdown() lets running requests finish
  RequestLimits limits;                         // max_tokens and vocab_size are taken from the engine
  ConnectionLimits connections;                 // connection cap and read deadlines
  // Runtime adapter loading (/v1/load_lora_adapter, /v1/unload_lora_adapter):
  // off (404) unless enabled; paths must resolve inside lora_dir (a canonical
  // directory); with API keys, only admin keys may load or unload.
  bool enable_lora_loading = false;
  std::string lora_dir;
  // Agent sessions: the retention a request gets when it names a session
  // without session_retention_s, and the most it may ask for (more is a 400).
  double session_retention_s = 60;
  double session_max_retention_s = 3600;
  std::set<std::string> admin_api_keys;  // a subset of api_keys' keys
};

class HttpServer {
 public:
  explicit HttpServer(ServerConfig cfg);
  // Same as HttpServer(cfg) followed by attach(engine); aborts on a bad
  // chat_template name (use the two-step form to get the error).
  HttpServer(ServingEngine& engine, ServerConfig cfg);
  ~HttpServer();  // shutdown() if still running
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serve requests with `engine` from now on. Errors on a chat_template that
  // is neither a built-in's name nor a template that compiles; the model's
  // own template failing to compile makes chat requests fail, saying why.
  // The engine must outlive the server.
  Status attach(ServingEngine& engine);

  // Binds host:port and starts the listener thread; returns the bound port.
  Result<int> start();
  // What renders chat turns and tools, for the log: "chat template: the
  // model's own (Jinja, ...); tools: ...". Set by attach.
  const std::string& chat_summary() const { return chat_summary_; }
  int port() const { return port_; }

  // Drains and stops (idempotent, blocking): new POSTs and /health get 503,
  // engine.drain(shutdown_timeout_s), streams still being written finish,
  // then the listener stops. Safe to call from any thread but a handler.
  void shutdown();
  // shutdown() without the final join of the listener (and its connection
  // threads): every request has been answered when it returns. A process
  // that is about to exit calls this instead.
  void drain();
  bool draining() const { return draining_.load(); }

  MetricsRegistry& registry() { return registry_; }
  // Run at each GET /metrics, before the text is made, one scrape at a time:
  // brings metrics kept elsewhere (the KV event publisher's) up to date. Add
  // hooks before start().
  void add_scrape_hook(std::function<void()> fn) { scrape_hooks_.push_back(std::move(fn)); }

 private:
  void setup_routes();          // the three below, and the body size limit
  void setup_error_handlers();  // OpenAI error bodies for what httplib answers itself
  void setup_api_routes();
  void setup_wrong_methods();
  // `admin`: also require a key in admin_api_keys (403 otherwise) when keys are set.
  bool authorize(const httplib::Request& req, httplib::Response& res, std::string* tenant,
                 bool admin = false) const;
  void handle_completions(const httplib::Request& req, httplib::Response& res, bool chat);
  void handle_models(httplib::Response& res) const;
  // POST /v1/load_lora_adapter (load) and /v1/unload_lora_adapter.
  void handle_adapter(const httplib::Request& req, httplib::Response& res, bool load);
  // Brings the per-model and per-scheme counters up to the engine's totals.
  void sync_model_counters(const ServingEngine& engine, const ServingStats& st);
  // POST/GET /v1/segments and DELETE /v1/segments/{id} (segments_handler.h).
  void handle_segments(const httplib::Request& req, httplib::Response& res);
  void handle_health(httplib::Response& res) const;
  // DELETE /v1/sessions/{id}: the tenant's session ends now (404 otherwise).
  void handle_session_delete(const httplib::Request& req, httplib::Response& res);
  void handle_metrics(httplib::Response& res);

  // Requests between acceptance and the end of their response; shutdown()
  // waits for zero before stopping the listener (which would cut streams).
  void request_begin();
  void request_end();

  ServerConfig cfg_;
  std::unique_ptr<ConnectionServer> http_;
  std::thread listener_;
  int port_ = 0;

  std::atomic<ServingEngine*> engine_{nullptr};
  // Set by attach() before engine_ is published; read only once engine_ is seen.
  RequestLimits limits_;
  // Compiled grammars for constrained decoding (null: xgrammar refused the
  // vocabulary; such requests are a 400 saying so).
  std::unique_ptr<GrammarCache> grammars_;
  std::string grammars_error_;
  std::optional<ChatRenderer> chat_;
  ToolFormat tool_format_ = ToolFormat::kHermes;
  bool template_tools_ = false;
  std::string chat_error_;
  std::string chat_summary_;

  std::atomic<bool> draining_{false};
  std::atomic<bool> stopped_{false};
  std::mutex shutdown_mu_;
  std::mutex active_mu_;
  std::condition_variable active_cv_;
  int active_ = 0;

  MetricsRegistry registry_;
  ServerMetrics metrics_{registry_};
  Gauge& requests_waiting_;
  Gauge& requests_running_;
  Counter& preemptions_;
  Gauge& connections_open_;
  Counter& connections_rejected_;
  Counter& grammar_hits_;
  Counter& grammar_compilations_;
  Counter& grammar_compile_seconds_;
  Gauge& grammar_last_compile_seconds_;
  Gauge& live_sessions_;
  Gauge& protected_blocks_;
  Counter& protected_hits_;
  Gauge& prefix_blocks_;
  Counter& remote_lookups_;
  Counter& remote_blocks_loaded_;
  Counter& remote_bytes_loaded_;
  Counter& remote_invalid_;
  Counter& remote_timeouts_;
  Gauge& kv_event_hashes_;
  std::vector<std::function<void()>> scrape_hooks_;
  std::mutex scrape_mu_;  // counters are brought up to the engine's totals one scrape at a time

  std::atomic<uint64_t> next_id_{1};
};

}  // namespace agentkv::server
