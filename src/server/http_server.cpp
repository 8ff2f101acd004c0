#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>

#include "server/completion_handler.h"
#include "server/models_handler.h"
#include "server/openai_response.h"
#include "server/segments_handler.h"
#include "server/tokenize_handler.h"
#include "sharing/scheme.h"
#include "tokenizer/tokenizer.h"

namespace agentkv::server {
namespace {

using json = nlohmann::json;

// httplib (as Debian builds it) listens with a backlog of 5: a burst of
// clients connecting at once would wait for SYN retransmits.
constexpr int kListenBacklog = 1024;

ApiError error_for_status(int status) {
  ApiError e;
  e.status = status;
  switch (status) {
    case 404:
      e.message = "Not found";
      e.code = "not_found";
      break;
    case 405:
      e.message = "Method not allowed";
      e.code = "method_not_allowed";
      break;
    case 413:
      e.message = "The request body is too large";
      e.code = "request_too_large";
      break;
    default:
      e.message = status == 400 ? "Malformed HTTP request" : "HTTP error " + std::to_string(status);
      if (status >= 500) e.type = "server_error";
      break;
  }
  return e;
}

// For the log: a loader's message may quote bytes of a file, control
// characters included; a terminal should not interpret them.
std::string printable(const std::string& s) {
  std::string out;
  for (const unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

ApiError unavailable(const std::string& why) {
  ApiError e;
  e.status = 503;
  e.type = "server_error";
  e.code = "unavailable";
  e.message = why;
  return e;
}

}  // namespace

HttpServer::HttpServer(ServerConfig cfg)
    : cfg_(std::move(cfg)),
      http_(std::make_unique<ConnectionServer>(cfg_.connections)),
      requests_waiting_(registry_.gauge("agentkv_requests_waiting", "Requests queued in the engine.")),
      requests_running_(
          registry_.gauge("agentkv_requests_running", "Requests being computed by the engine.")),
      preemptions_(
          registry_.counter("agentkv_preemptions_total", "Sequences preempted for lack of KV blocks.")),
      connections_open_(registry_.gauge("agentkv_http_connections_open", "HTTP connections being served.")),
      connections_rejected_(registry_.counter("agentkv_http_connections_rejected_total",
                                              "HTTP connections answered 503 for the connection cap.")),
      grammar_hits_(registry_.counter("agentkv_grammar_cache_hits_total",
                                      "Constrained requests whose grammar was already compiled.")),
      grammar_compilations_(registry_.counter("agentkv_grammar_compilations_total",
                                              "Grammars compiled (first use of a schema, regex or grammar).")),
      grammar_compile_seconds_(registry_.counter("agentkv_grammar_compile_seconds_total",
                                                 "Seconds spent compiling grammars.")),
      grammar_last_compile_seconds_(
          registry_.gauge("agentkv_grammar_last_compile_seconds", "The last grammar compilation's seconds.")),
      live_sessions_(registry_.gauge("agentkv_sessions_live", "Agent sessions with retention time left.")),
      protected_blocks_(registry_.gauge("agentkv_session_protected_blocks", "KV blocks agent sessions protect.")),
      protected_hits_(registry_.counter("agentkv_session_protected_hits_total",
                                        "Prefix and segment hits on KV blocks a session protects.")),
      prefix_blocks_(registry_.gauge("agentkv_kv_prefix_blocks",
                                     "KV blocks registered in the prefix index (exact and approximate).")),
      remote_lookups_(registry_.counter("agentkv_kv_remote_lookups_total",
                                        "Requests that asked the remote KV tier for their prompt's blocks.")),
      remote_blocks_loaded_(registry_.counter("agentkv_kv_remote_blocks_loaded_total",
                                              "KV blocks loaded from the remote tier.")),
      remote_bytes_loaded_(registry_.counter("agentkv_kv_remote_loaded_bytes_total",
                                             "Bytes of KV blocks loaded from the remote tier.")),
      remote_invalid_(registry_.counter("agentkv_kv_remote_invalid_total",
                                        "Remote tier values that did not verify (torn, foreign, stale): misses.")),
      remote_timeouts_(registry_.counter("agentkv_kv_remote_timeouts_total",
                                         "Requests that stopped waiting for the remote tier and recomputed.")),
      kv_event_hashes_(registry_.gauge("agentkv_kv_events_hashes",
                                       "Block hashes the KV cache events announced and have not removed "
                                       "(aliases included; 0 without --kv-events).")) {
  // Response ids differ across restarts.
  next_id_ = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  setup_routes();
}

HttpServer::HttpServer(ServingEngine& engine, ServerConfig cfg) : HttpServer(std::move(cfg)) {
  const Status st = attach(engine);
  if (!st.is_ok()) {
    std::fprintf(stderr, "agentkv: %s\n", st.message().c_str());
    std::abort();
  }
}

HttpServer::~HttpServer() {
  if (port_ != 0) shutdown();
}

Status HttpServer::attach(ServingEngine& engine) {
  limits_ = cfg_.limits;
  limits_.max_tokens = engine.max_model_len();
  limits_.vocab_size = engine.vocab_size();
  chat_.reset();
  chat_error_.clear();
  const std::string& model_template = engine.tokenizer().vocab().chat_template;
  Result<ChatRenderer> chat = ChatRenderer::create(engine.tokenizer(), cfg_.chat_template);
  if (chat.is_ok()) {
    chat_.emplace(std::move(chat).value());
  } else if (!cfg_.chat_template.empty()) {
    return chat.status();
  } else {
    chat_error_ = "the model's chat template cannot be used (" + chat.status().message() +
                  "); start the server with --chat-template chatml|llama3|mistral|gemma or a .jinja file";
  }
  tool_format_ = ToolFormat::kHermes;
  if (!cfg_.tool_format.empty()) {
    AKV_ASSIGN_OR_RETURN(tool_format_, tool_format_from_name(cfg_.tool_format));
  } else if (chat_ && chat_->family()) {
    tool_format_ = tool_format_detect(chat_->source().empty() ? model_template : chat_->source(), *chat_->family());
  }
  template_tools_ = chat_ && chat_->renders_tools() && tool_format_taught_by(chat_->source(), tool_format_);
  chat_summary_ = chat_ ? "chat template: " + chat_->description() : "chat template: none (" + chat_error_ + ")";
  chat_summary_ += std::string("; tools: ") +
                   (template_tools_ ? "rendered by the template" : "rendered in agentkv's wording") +
                   ", calls in the " + tool_format_name(tool_format_) + " format" +
                   (cfg_.bare_tool_calls && tool_format_ == ToolFormat::kHermes ? " (or as bare JSON under auto)" : "");
  Result<std::unique_ptr<GrammarCache>> g = GrammarCache::create(engine.tokenizer(), engine.vocab_size());
  if (g.is_ok()) {
    grammars_ = std::move(g).value();
  } else {
    grammars_error_ = g.status().message();
  }
  engine_.store(&engine, std::memory_order_release);
  return Status::ok();
}

Result<int> HttpServer::start() {
  // A client that disconnects mid-write must not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  int port = cfg_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(cfg_.host);
  } else if (!http_->bind_to_port(cfg_.host, port)) {
    port = -1;
  }
  if (port <= 0) {
    return make_error(ErrorCode::kIo, "cannot listen on ", cfg_.host, ":", cfg_.port,
                      " (address in use or not local?)");
  }
  http_->widen_backlog(kListenBacklog);
  listener_ = std::thread([this] { http_->listen_after_bind(); });
  // stop() is a no-op until the listener runs; wait so shutdown() cannot miss it.
  while (!http_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  port_ = port;
  return port;
}

void HttpServer::shutdown() {
  drain();
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (listener_.joinable()) listener_.join();
}

void HttpServer::drain() {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (stopped_) return;
  draining_ = true;
  if (ServingEngine* e = engine_.load(std::memory_order_acquire)) e->drain(cfg_.shutdown_timeout_s);
  {
    // Every request has its final event now (drain cancels the late ones);
    // wait for the streams to write it. Bounded: a write times out.
    std::unique_lock<std::mutex> l(active_mu_);
    active_cv_.wait_for(l, std::chrono::seconds(15), [&] { return active_ == 0; });
  }
  http_->stop();
  http_->wake_all();  // idle keep-alive connections close now, not at their deadline
  stopped_ = true;
}

void HttpServer::request_begin() {
  std::lock_guard<std::mutex> l(active_mu_);
  ++active_;
}

void HttpServer::request_end() {
  {
    std::lock_guard<std::mutex> l(active_mu_);
    --active_;
  }
  active_cv_.notify_all();
}

void HttpServer::setup_routes() {
  // httplib answers 413 (reading and discarding the body) past this size.
  http_->set_payload_max_length(cfg_.limits.max_body_bytes);
  setup_error_handlers();
  setup_api_routes();
  setup_wrong_methods();
}

void HttpServer::setup_error_handlers() {
  httplib::Server& s = *http_;

  s.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    // A chunked request body has no size limit in this httplib; require a length.
    if (req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos) {
      ApiError e;
      e.status = 411;
      e.code = "length_required";
      e.message = "a request body needs a Content-Length (chunked bodies are not accepted)";
      write_error(res, e);
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Statuses httplib sets itself (404, 413, 400 for a malformed request)
  // still get an OpenAI error body.
  s.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        write_error(res, error_for_status(res.status));
        return httplib::Server::HandlerResponse::Handled;
      }));
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    ApiError e = error_for_status(500);
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      e.message = std::string("internal error: ") + ex.what();
    } catch (...) {
      e.message = "internal error";
    }
    write_error(res, e);
  });
  s.set_logger([this](const httplib::Request&, const httplib::Response& res) {
    metrics_.requests(std::to_string(res.status)).inc();
  });
}

void HttpServer::setup_api_routes() {
  httplib::Server& s = *http_;
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_completions(req, res, false);
  });
  s.Post("/v1/chat/completions",
         [this](const httplib::Request& req, httplib::Response& res) { handle_completions(req, res, true); });
  s.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorize(req, res, nullptr)) handle_models(res);
  });
  s.Post("/v1/load_lora_adapter",
         [this](const httplib::Request& req, httplib::Response& res) { handle_adapter(req, res, true); });
  s.Post("/v1/unload_lora_adapter",
         [this](const httplib::Request& req, httplib::Response& res) { handle_adapter(req, res, false); });
  // vLLM's tokenizer endpoints (tokenize_handler.h).
  for (const bool tokenize : {true, false}) {
    s.Post(tokenize ? "/tokenize" : "/detokenize", [this, tokenize](const httplib::Request& req, httplib::Response& res) {
      if (!authorize(req, res, nullptr)) return;
      ServingEngine* engine = engine_.load(std::memory_order_acquire);
      if (draining_) return write_error(res, unavailable("the server is shutting down"));
      if (!engine) return write_error(res, unavailable("the model is still loading"));
      request_begin();  // shutdown() waits for this answer
      const ApiResult<json> r = tokenize ? tokenize_request(*engine, cfg_.model_name, req.body, limits_)
                                         : detokenize_request(*engine, cfg_.model_name, req.body, limits_);
      if (r.ok()) {
        res.set_content(dump_json(r.value()), "application/json");
      } else {
        write_error(res, r.error());
      }
      request_end();
    });
  }
  // The frozen segment pool (segments_handler.h).
  s.Post("/v1/segments", [this](const httplib::Request& req, httplib::Response& res) { handle_segments(req, res); });
  s.Get("/v1/segments", [this](const httplib::Request& req, httplib::Response& res) { handle_segments(req, res); });
  s.Delete(R"(/v1/segments/([^/]+))",
           [this](const httplib::Request& req, httplib::Response& res) { handle_segments(req, res); });
  s.Delete(R"(/v1/sessions/([^/]+))",
           [this](const httplib::Request& req, httplib::Response& res) { handle_session_delete(req, res); });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) { handle_health(res); });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { handle_metrics(res); });
}

// The known paths with the wrong method: 405 with Allow.
void HttpServer::setup_wrong_methods() {
  httplib::Server& s = *http_;
  auto not_allowed = [](const char* allow) {
    return [allow](const httplib::Request&, httplib::Response& res) {
      write_error(res, error_for_status(405));
      res.set_header("Allow", allow);
    };
  };
  for (const char* path :
       {"/v1/completions", "/v1/chat/completions", "/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/tokenize",
        "/detokenize"}) {
    s.Get(path, not_allowed("POST"));
  }
  s.Put("/v1/segments", not_allowed("GET, POST"));
  s.Delete("/v1/segments", not_allowed("GET, POST"));
  s.Get(R"(/v1/segments/([^/]+))", not_allowed("DELETE"));
  s.Post(R"(/v1/segments/([^/]+))", not_allowed("DELETE"));
  for (const char* path : {"/v1/models", "/health", "/metrics"}) {
    s.Post(path, not_allowed("GET"));
    s.Put(path, not_allowed("GET"));
    s.Delete(path, not_allowed("GET"));
  }
}

bool HttpServer::authorize(const httplib::Request& req, httplib::Response& res, std::string* tenant,
                           bool admin) const {
  if (cfg_.api_keys.empty()) return true;
  const std::string h = req.get_header_value("Authorization");
  static const std::string kBearer = "Bearer ";
  if (h.compare(0, kBearer.size(), kBearer) == 0) {
    const std::string key = h.substr(kBearer.size());
    auto it = cfg_.api_keys.find(key);
    if (it != cfg_.api_keys.end()) {
      if (admin && cfg_.admin_api_keys.count(key) == 0) {
        ApiError e;
        e.status = 403;
        e.type = "permission_error";
        e.code = "insufficient_permissions";
        e.message = "This API key may not load or unload adapters (only an admin key may: --admin-api-key)";
        write_error(res, e);
        return false;
      }
      if (tenant) *tenant = it->second;
      return true;
    }
  }
  ApiError e;
  e.status = 401;
  e.code = "invalid_api_key";
  e.message =
      h.empty() ? "Missing API key: send 'Authorization: Bearer <key>'" : "Incorrect API key provided";
  write_error(res, e);
  res.set_header("WWW-Authenticate", "Bearer");
  return false;
}

void HttpServer::handle_completions(const httplib::Request& req, httplib::Response& res, bool chat) {
  std::string tenant;
  if (!authorize(req, res, &tenant)) return;
  ServingEngine* engine = engine_.load(std::memory_order_acquire);
  if (draining_) return write_error(res, unavailable("the server is shutting down"));
  if (!engine) return write_error(res, unavailable("the model is still loading"));
  request_begin();
  CompletionEnv env;
  env.engine = engine;
  env.metrics = &metrics_;
  env.model_name = cfg_.model_name;
  env.limits = limits_;
  env.chat = chat_ ? &*chat_ : nullptr;
  env.template_tools = template_tools_;
  env.bare_tool_calls = cfg_.bare_tool_calls;
  env.grammars = grammars_.get();
  env.grammars_error = grammars_error_;
  env.chat_error = chat_error_;
  env.tool_format = tool_format_;
  env.tenant = std::move(tenant);
  env.session_header = req.get_header_value("X-Session-ID");
  env.session_retention_s = cfg_.session_retention_s;
  env.session_max_retention_s = cfg_.session_max_retention_s;
  env.serial = next_id_.fetch_add(1);
  env.on_finished = [this] { request_end(); };
  handle_completion(std::move(env), req, res, chat);
}

void HttpServer::handle_session_delete(const httplib::Request& req, httplib::Response& res) {
  std::string tenant;
  if (!authorize(req, res, &tenant)) return;
  ServingEngine* engine = engine_.load(std::memory_order_acquire);
  if (!engine) return write_error(res, unavailable("the model is still loading"));
  const std::string id = req.matches[1].str();
  // The same 404 for an unknown id and another tenant's: nothing leaks.
  const Status st = valid_session_id(id) ? engine->end_session(tenant, id)
                                         : make_error(ErrorCode::kNotFound, "no session");
  if (!st.is_ok()) {
    ApiError e;
    e.status = st.code() == ErrorCode::kUnavailable ? 503 : 404;
    e.message = st.code() == ErrorCode::kUnavailable ? st.message() : "no session '" + id + "'";
    e.param = "session_id";
    return write_error(res, e);
  }
  res.set_content(dump_json(json{{"id", id}, {"object", "session"}, {"deleted", true}}), "application/json");
}

void HttpServer::handle_models(httplib::Response& res) const {
  const json body = models_list(cfg_.model_name, engine_.load(std::memory_order_acquire),
                                static_cast<int64_t>(std::time(nullptr)));
  res.set_content(dump_json(body), "application/json");
}

void HttpServer::handle_adapter(const httplib::Request& req, httplib::Response& res, bool load) {
  if (!cfg_.enable_lora_loading) {
    // As if the route did not exist (vLLM keeps these behind an environment switch).
    ApiError e = error_for_status(404);
    e.message =
        "Loading adapters at run time is disabled on this server (it is started with "
        "--enable-lora-loading and --lora-dir DIR to allow it)";
    return write_error(res, e);
  }
  if (!authorize(req, res, nullptr, /*admin=*/true)) return;
  ServingEngine* engine = engine_.load(std::memory_order_acquire);
  if (draining_) return write_error(res, unavailable("the server is shutting down"));
  if (!engine) return write_error(res, unavailable("the model is still loading"));
  request_begin();  // shutdown() waits for this answer
  std::string detail;
  const ApiResult<std::string> r =
      load ? load_adapter(*engine, cfg_.model_name, cfg_.lora_dir, req.body, limits_, &detail)
           : unload_adapter(*engine, req.body, limits_);
  if (!detail.empty()) std::fprintf(stderr, "agentkv: %s\n", printable(detail).c_str());
  if (r.ok()) {
    std::fprintf(stderr, "agentkv: %s\n", printable(r.value()).c_str());
    res.status = 200;
    res.set_content(r.value(), "text/plain; charset=utf-8");  // vLLM answers with plain text
  } else {
    write_error(res, r.error());
  }
  request_end();
}

void HttpServer::handle_segments(const httplib::Request& req, httplib::Response& res) {
  std::string tenant;
  if (!authorize(req, res, &tenant)) return;
  ServingEngine* engine = engine_.load(std::memory_order_acquire);
  if (draining_) return write_error(res, unavailable("the server is shutting down"));
  if (!engine) return write_error(res, unavailable("the model is still loading"));
  request_begin();  // shutdown() waits for this answer
  ApiResult<json> r = json{};
  if (req.method == "POST") {
    r = create_segment_request(*engine, tenant, req.body, limits_);
  } else if (req.method == "DELETE") {
    r = delete_segment_request(*engine, tenant, req.matches[1].str());
  } else {
    r = list_segments_response(*engine, tenant);
  }
  if (r.ok()) {
    res.set_content(dump_json(r.value()), "application/json");
  } else {
    write_error(res, r.error());
  }
  request_end();
}

void HttpServer::handle_health(httplib::Response& res) const {
  const char* state = "ok";
  if (draining_) {
    state = "draining";
  } else if (!engine_.load(std::memory_order_acquire)) {
    state = "loading";
  }
  res.status = std::string(state) == "ok" ? 200 : 503;
  res.set_content(dump_json({{"status", state}}), "application/json");
}

namespace {
// The engine keeps totals; a Prometheus counter only goes up, by the delta.
void sync_counter(Counter& c, int64_t total) { c.sync_to(static_cast<double>(total)); }
}  // namespace

void HttpServer::sync_model_counters(const ServingEngine& engine, const ServingStats& st) {
  // Every served model and scheme has its series from the start (at 0), so a
  // rate() over a new adapter sees its first requests.
  for (const ServedModel& m : engine.models()) {
    const std::string& model = m.name.empty() ? cfg_.model_name : m.name;
    metrics_.model_requests(model);
    metrics_.model_prompt_tokens(model);
    metrics_.model_cached_tokens(model);
    metrics_.model_completion_tokens(model);
  }
  std::vector<const char*> schemes(sharing_scheme_names().begin(), sharing_scheme_names().end());
  schemes.insert(schemes.end(), sharing_composed_names().begin(), sharing_composed_names().end());
  for (const char* scheme : schemes) {
    metrics_.scheme_prompt_tokens(scheme);
    metrics_.scheme_cached_tokens(scheme);
    metrics_.scheme_reused_tokens(scheme);
    metrics_.scheme_computed_token_layers(scheme);
    metrics_.scheme_reused_token_layers(scheme);
  }
  for (const auto& [name, a] : st.per_model) {
    const std::string& model = name.empty() ? cfg_.model_name : name;
    sync_counter(metrics_.model_requests(model), a.requests);
    sync_counter(metrics_.model_prompt_tokens(model), a.prompt_tokens);
    sync_counter(metrics_.model_cached_tokens(model), a.cached_tokens);
    sync_counter(metrics_.model_completion_tokens(model), a.completion_tokens);
  }
  for (const auto& [scheme, n] : st.prompt_tokens_by_scheme) sync_counter(metrics_.scheme_prompt_tokens(scheme), n);
  for (const auto& [scheme, n] : st.cached_tokens_by_scheme) sync_counter(metrics_.scheme_cached_tokens(scheme), n);
  for (const auto& [scheme, n] : st.reused_tokens_by_scheme) sync_counter(metrics_.scheme_reused_tokens(scheme), n);
  for (const auto& [scheme, n] : st.computed_token_layers_by_scheme) {
    sync_counter(metrics_.scheme_computed_token_layers(scheme), n);
  }
  for (const auto& [scheme, n] : st.reused_token_layers_by_scheme) {
    sync_counter(metrics_.scheme_reused_token_layers(scheme), n);
  }
}

void HttpServer::handle_metrics(httplib::Response& res) {
  if (ServingEngine* e = engine_.load(std::memory_order_acquire)) {
    const ServingStats st = e->stats();
    std::lock_guard<std::mutex> lock(scrape_mu_);
    metrics_.kv_blocks_used.set(st.kv_blocks_used);
    metrics_.kv_blocks_cached.set(st.kv_blocks_cached);
    metrics_.kv_blocks_free.set(st.kv_blocks_free);
    requests_waiting_.set(st.n_waiting);
    requests_running_.set(st.n_running);
    // The engine keeps totals; Prometheus counters only go up by deltas.
    const double hits = static_cast<double>(st.prefix_hit_tokens) - metrics_.prefix_hit_tokens.value();
    if (hits > 0) metrics_.prefix_hit_tokens.inc(hits);
    const double pre = static_cast<double>(st.preemptions) - preemptions_.value();
    if (pre > 0) preemptions_.inc(pre);
    sync_model_counters(*e, st);
    metrics_.frozen_segments.set(st.frozen_segments);
    metrics_.frozen_blocks.set(st.frozen_blocks);
    metrics_.step_token_layers_max.set(static_cast<double>(st.max_step_token_layers));
    metrics_.prepacked_weight_bytes.set(static_cast<double>(st.prepacked_weight_bytes));
    sync_counter(metrics_.segment_evictions, st.segment_evictions);
    metrics_.lr_blocks_used.set(st.lr_blocks_used);
    metrics_.lr_blocks_cached.set(st.lr_blocks_cached);
    metrics_.lr_blocks_protected.set(st.lr_blocks_protected);
    sync_counter(metrics_.lr_fallbacks, st.lr_fallback_requests);
    live_sessions_.set(st.live_sessions);
    protected_blocks_.set(st.protected_blocks);
    sync_counter(protected_hits_, st.protected_hits);
    prefix_blocks_.set(st.prefix_blocks);
    kv_event_hashes_.set(static_cast<double>(st.kv_event_hashes));
    sync_counter(remote_lookups_, st.remote_lookups);
    sync_counter(remote_blocks_loaded_, st.remote_blocks_loaded);
    sync_counter(remote_bytes_loaded_, st.remote_bytes_loaded);
    sync_counter(remote_invalid_, st.remote_invalid);
    sync_counter(remote_timeouts_, st.remote_timeouts);
  }
  if (!scrape_hooks_.empty()) {
    std::lock_guard<std::mutex> lock(scrape_mu_);
    for (const auto& fn : scrape_hooks_) fn();
  }
  if (grammars_) {
    const GrammarCacheStats gs = grammars_->stats();
    std::lock_guard<std::mutex> lock(scrape_mu_);
    sync_counter(grammar_hits_, gs.hits);
    sync_counter(grammar_compilations_, gs.misses);
    if (gs.compile_seconds > grammar_compile_seconds_.value()) {
      grammar_compile_seconds_.inc(gs.compile_seconds - grammar_compile_seconds_.value());
    }
    grammar_last_compile_seconds_.set(gs.last_compile_seconds);
  }
  {
    std::lock_guard<std::mutex> lock(scrape_mu_);
    connections_open_.set(static_cast<double>(http_->open_connections()));
    sync_counter(connections_rejected_, static_cast<int64_t>(http_->rejected_connections()));
  }
  res.set_content(registry_.expose(), kMetricsContentType);
}

}  // namespace agentkv::server
