// `agentkv serve`: the OpenAI-compatible HTTP server (src/server) in front of
// the continuous-batching engine. The port opens first (GET /health answers
// 503 while the model loads); SIGTERM or SIGINT drains and exits 0. Adapters
// given with --adapter (or the config's "adapters") are served next to the
// base; with --enable-lora-loading, more can be loaded at run time from
// --lora-dir (POST /v1/load_lora_adapter).
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "adapter/registry.h"
#include "agentkv/serving.h"
#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cluster/kv_event_publisher.h"
#include "cluster/redis_kv_tier.h"
#include "server/adapter_path.h"
#include "server/fidelity_audit.h"
#include "server/http_server.h"
#include "server/segment_store.h"
#include "server/serve_config.h"
#include "sharing/profile_dir.h"
#include "sharing/scheme.h"
#include "util/file_id.h"

namespace agentkv::cli {

namespace {

struct ServeArgs {
  ServingOptions engine;
  server::ServerConfig server;
  std::vector<std::string> api_keys;        // KEY=TENANT
  std::vector<std::string> admin_api_keys;  // KEY=TENANT, may also load and unload adapters
  std::vector<std::string> adapters;  // NAME=PATH[:kind], from the command line
  std::vector<ServingOptions::AdapterSpec> config_adapters;  // from --config, used without --adapter
  std::string segment_dir;  // --segment-dir: frozen segments saved at shutdown, restored at start
  std::string config_path;
  std::string profile_dir = "profiles";  // --profile-dir: relay/droidspeak profiles found by model id
  bool no_prefix_caching = false;
  cluster::KvEventPublisherOptions kv_events;  // endpoint "": no KV cache events
  cluster::RedisKvTierOptions kv_remote;       // url "": no remote tier
  server::FidelityAuditConfig audit;           // rate 0: no audit
};

// Set by the signal handler, polled by the main thread: a lock-free atomic
// store is all a handler may safely do.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_stop_signal(int) { g_stop.store(true); }

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

// One JSON value as the strings CLI11 would have read from the command line.
Result<std::vector<std::string>> config_strings(const std::string& key, const nlohmann::json& v) {
  std::vector<std::string> out;
  auto scalar = [&](const nlohmann::json& x) -> Status {
    if (x.is_string()) {
      out.push_back(x.get<std::string>());
    } else if (x.is_boolean()) {
      out.push_back(x.get<bool>() ? "true" : "false");
    } else if (x.is_number()) {
      out.push_back(x.dump());
    } else {
      return make_error(ErrorCode::kInvalidArgument, "key '", key,
                        "': expected a string, number or boolean, got ", x.type_name());
    }
    return Status::ok();
  };
  if (v.is_array()) {
    for (const auto& x : v) AKV_RETURN_IF_ERROR(scalar(x));
  } else {
    AKV_RETURN_IF_ERROR(scalar(v));
  }
  return out;
}

// The config keys that are not spelled as their flag: "adapters" (a list of
// strings or objects, see server/serve_config.h) for --adapter, and
// "kv_sharing" as the request field is spelled.
std::string canonical_config_key(const std::string& key) {
  if (key == "adapters") return "adapter";
  if (key == "kv_sharing") return "kv-sharing";
  return key;
}

// Applies the JSON object in `path` to the options of `cmd` that the command
// line did not set. Keys are the long flag names without the dashes.
Status apply_config_file(CLI::App* cmd, ServeArgs& a, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kIo, "cannot open config file ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(ErrorCode::kParse, "config file ", path, ": not valid JSON");
  if (!j.is_object()) return make_error(ErrorCode::kParse, "config file ", path, ": expected a JSON object");
  std::map<std::string, std::string> seen;  // canonical key -> the spelling used
  for (const auto& [given_key, value] : j.items()) {
    const std::string key = canonical_config_key(given_key);
    if (auto [it, fresh] = seen.emplace(key, given_key); !fresh) {
      return make_error(ErrorCode::kInvalidArgument, "config file ", path, ": keys '", it->second, "' and '",
                        given_key, "' set the same flag");
    }
    if (key == "adapter") {
      if (cmd->get_option("--adapter")->count() > 0) continue;  // the command line wins
      auto specs = server::adapter_specs_from_json(value);
      if (!specs.is_ok()) return specs.status().with_context("config file " + path + ": key '" + given_key + "'");
      a.config_adapters = std::move(specs).value();
      continue;
    }
    CLI::Option* opt = key == "config" || key == "help" ? nullptr : cmd->get_option_no_throw("--" + key);
    if (!opt || opt->get_lnames().empty() ||
        std::find(opt->get_lnames().begin(), opt->get_lnames().end(), key) == opt->get_lnames().end()) {
      return make_error(ErrorCode::kInvalidArgument, "config file ", path, ": unknown key '", key,
                        "' (keys are the long flag names of `agentkv serve`, without the dashes)");
    }
    if (opt->count() > 0) continue;  // the command line wins
    auto strings = config_strings(key, value);
    if (!strings.is_ok()) return strings.status().with_context("config file " + path);
    if (strings->size() > 1 && opt->get_expected_max() < static_cast<int>(strings->size())) {
      return make_error(ErrorCode::kInvalidArgument, "config file ", path, ": key '", key,
                        "' takes one value");
    }
    try {
      opt->add_result(*strings);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return make_error(ErrorCode::kInvalidArgument, "config file ", path, ": key '", key, "': ", e.what());
    }
  }
  return Status::ok();
}

// --api-key and --admin-api-key (both KEY=TENANT) into ServerConfig's keys;
// a key may appear once in all.
Status parse_api_keys(const ServeArgs& a, server::ServerConfig& cfg) {
  cfg.api_keys.clear();
  cfg.admin_api_keys.clear();
  for (const bool admin : {false, true}) {
    const char* flag = admin ? "--admin-api-key" : "--api-key";
    for (const std::string& s : admin ? a.admin_api_keys : a.api_keys) {
      const size_t eq = s.find('=');
      if (eq == std::string::npos || eq == 0) {
        return make_error(ErrorCode::kInvalidArgument, flag, " wants KEY=TENANT, got '", s, "'");
      }
      const std::string key = s.substr(0, eq);
      if (!cfg.api_keys.emplace(key, s.substr(eq + 1)).second) {
        return make_error(ErrorCode::kInvalidArgument, flag, ": key '", key, "' given twice");
      }
      if (admin) cfg.admin_api_keys.insert(key);
    }
  }
  return Status::ok();
}

// --enable-lora-loading needs --lora-dir (resolved here, once), and with API
// keys an admin key, else nobody could use it.
Status check_lora_loading(server::ServerConfig& cfg) {
  if (!cfg.enable_lora_loading) {
    if (!cfg.lora_dir.empty()) {
      return make_error(ErrorCode::kInvalidArgument, "--lora-dir is only used with --enable-lora-loading");
    }
    return Status::ok();
  }
  if (cfg.lora_dir.empty()) {
    return make_error(
        ErrorCode::kInvalidArgument,
        "--enable-lora-loading needs --lora-dir DIR (the only place adapters may be loaded from)");
  }
  AKV_ASSIGN_OR_RETURN(cfg.lora_dir, server::canonical_lora_dir(cfg.lora_dir));
  if (!cfg.api_keys.empty() && cfg.admin_api_keys.empty()) {
    return make_error(
        ErrorCode::kInvalidArgument,
        "--enable-lora-loading with API keys needs an --admin-api-key (only admin keys may load "
        "and unload adapters)");
  }
  return Status::ok();
}

// Every connection is a descriptor: raise the soft limit to the hard one, and
// keep the connection cap below what the process may open (past the limit
// accept() fails and clients would wait in the backlog instead of getting 503).
void fit_fd_limit(server::ServerConfig& cfg) {
  constexpr rlim_t kReserve = 64;  // model file, log, listener, engine
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  size_t& cap = cfg.connections.max_connections;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < cap + kReserve) {
    const size_t fit = rl.rlim_cur > kReserve * 2 ? static_cast<size_t>(rl.rlim_cur - kReserve) : 16;
    std::fprintf(stderr, "agentkv: --max-connections %zu lowered to %zu (open file limit %llu)\n", cap, fit,
                 static_cast<unsigned long long>(rl.rlim_cur));
    cap = fit;
  }
}

// --adapter (or the config's adapters) into ServingOptions::adapters, checked
// before the model loads: the form, the names, and that each path exists.
Status resolve_adapters(ServeArgs& a) {
  std::vector<ServingOptions::AdapterSpec> specs = a.config_adapters;
  if (!a.adapters.empty()) {
    specs.clear();
    for (const std::string& s : a.adapters) {
      AKV_ASSIGN_OR_RETURN(ServingOptions::AdapterSpec spec, server::parse_adapter_spec(s));
      specs.push_back(std::move(spec));
    }
  }
  AKV_RETURN_IF_ERROR(server::check_adapter_specs(specs, a.server.model_name));
  for (const auto& s : specs) {
    AKV_RETURN_IF_ERROR(check_adapter_name(s.name).with_context("--adapter " + s.name));
    std::error_code ec;
    if (!std::filesystem::exists(s.path, ec)) {
      return make_error(ErrorCode::kNotFound, "--adapter ", s.name, ": ", s.path,
                        " does not exist (a PEFT directory or a GGUF LoRA file)");
    }
  }
  a.engine.adapters = std::move(specs);
  return Status::ok();
}

// Prefills and pins every segment saved in dir (server::load_segments),
// before the server reports ready; whatever cannot be restored is a warning.
void restore_segments(ServingEngine& engine, const std::string& dir, const std::string& model_id) {
  std::vector<std::string> warnings;
  const std::vector<SegmentSpec> segs = server::load_segments(dir, model_id, &warnings);
  for (const std::string& w : warnings) std::fprintf(stderr, "agentkv: warning: %s\n", w.c_str());
  if (segs.empty()) return;
  std::fprintf(stderr, "agentkv: restoring %zu frozen segments from %s\n", segs.size(), dir.c_str());
  size_t ok = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    Result<SegmentInfo> r = engine.create_segment(segs[i]);
    if (r.is_ok()) {
      ++ok;
    } else {
      std::fprintf(stderr, "agentkv: warning: segment '%s' (%zu tokens) not restored: %s\n", segs[i].id.c_str(),
                   segs[i].tokens.size(), r.status().message().c_str());
    }
    if ((i + 1) % 16 == 0 || i + 1 == segs.size()) {
      std::fprintf(stderr, "agentkv: restored %zu/%zu segments\n", ok, i + 1);
    }
  }
}

// The relay and DroidSpeak profiles of the model served, from --profile-dir,
// where neither --relay-profile nor --droidspeak-profile names one: their
// layers become the schemes' defaults, so a request asking for relay or
// droidspeak runs instead of being refused. Hidden-state snapshots are kept
// for them only where the server's default scheme is theirs: they would
// cost every other request a tenth of the pool each.
Status find_profiles(ServeArgs& a, std::string* model_id) {
  const bool relay = a.engine.relay_profile.empty();
  const bool droidspeak = a.engine.droidspeak_profile.empty() && !a.engine.kv_sharing_params.critical_layers;
  if (a.profile_dir.empty() || (!relay && !droidspeak)) return Status::ok();
  if (model_id->empty()) {
    AKV_ASSIGN_OR_RETURN(*model_id, file_content_id(a.engine.model_path));
  }
  if (relay) {
    a.engine.relay_profile = find_profile(a.profile_dir, kRelayProfileSuffix, kRelayProfileFormat, *model_id);
    a.engine.relay_snapshots = a.engine.kv_sharing == "relay";
  }
  if (droidspeak) {
    a.engine.droidspeak_profile =
        find_profile(a.profile_dir, kDroidspeakProfileSuffix, kDroidspeakProfileFormat, *model_id);
    a.engine.droidspeak_snapshots = a.engine.kv_sharing == "droidspeak";
  }
  auto report = [&](bool looked, const std::string& path, const char* what, bool snapshots) {
    if (!looked) return;
    if (path.empty()) {
      std::fprintf(stderr,
                   "agentkv: no %s profile of this model in '%s': requests under %s need --%s-profile\n",
                   what, a.profile_dir.c_str(), what, what);
    } else if (snapshots) {
      std::fprintf(stderr, "agentkv: %s profile %s (found by model id)\n", what, path.c_str());
    } else {
      std::fprintf(
          stderr,
          "agentkv: %s profile %s (found by model id; no hidden-state snapshots, so %s recomputes from "
          "layer 0: --%s-profile keeps them)\n",
          what, path.c_str(), what, what);
    }
  };
  report(relay, a.engine.relay_profile, "relay", a.engine.relay_snapshots);
  report(droidspeak, a.engine.droidspeak_profile, "droidspeak", a.engine.droidspeak_snapshots);
  return Status::ok();
}

Status serve(ServeArgs& a, CLI::App* cmd) {
  if (!a.config_path.empty()) AKV_RETURN_IF_ERROR(apply_config_file(cmd, a, a.config_path));
  AKV_RETURN_IF_ERROR(parse_api_keys(a, a.server));
  AKV_RETURN_IF_ERROR(check_lora_loading(a.server));
  fit_fd_limit(a.server);
  AKV_RETURN_IF_ERROR(server::check_kv_sharing(a.engine.kv_sharing));
  a.engine.prefix_caching = !a.no_prefix_caching;
  if (a.server.model_name.empty())
    a.server.model_name = std::filesystem::path(a.engine.model_path).stem().string();
  AKV_RETURN_IF_ERROR(resolve_adapters(a));

  std::string model_id;  // the GGUF's content id, with --segment-dir: names the model the segments are for
  if (!a.segment_dir.empty()) {
    AKV_RETURN_IF_ERROR(server::check_segment_dir(a.segment_dir));
    AKV_ASSIGN_OR_RETURN(model_id, file_content_id(a.engine.model_path));
  }

  AKV_RETURN_IF_ERROR(find_profiles(a, &model_id));

  if (a.kv_events.endpoint.empty() && !a.kv_events.replay_endpoint.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "--kv-events-replay needs --kv-events");
  }

  install_signal_handlers();
  std::unique_ptr<cluster::KvEventPublisher> events;  // outlives the engine, which feeds it
  std::unique_ptr<ServingEngine> engine;  // outlives the server below
  server::HttpServer http(a.server);
  if (!a.kv_events.endpoint.empty()) {
    AKV_ASSIGN_OR_RETURN(events, cluster::KvEventPublisher::start(a.kv_events));
    a.engine.kv_events = [p = events.get()](KvEventBatch&& b) { p->publish(std::move(b)); };
    server::Counter& sent = http.registry().counter("agentkv_kv_events_published_total",
                                                    "KV cache event batches sent on the PUB socket.");
    server::Counter& dropped = http.registry().counter(
        "agentkv_kv_events_dropped_total", "KV cache event batches dropped because the publisher's queue was full.");
    http.add_scrape_hook([&sent, &dropped, p = events.get()] {
      sent.sync_to(static_cast<double>(p->n_published()));
      dropped.sync_to(static_cast<double>(p->n_dropped()));
    });
    std::fprintf(stderr, "agentkv: KV cache events on %s%s%s (topic '%s')\n", events->endpoint().c_str(),
                 events->replay_endpoint().empty() ? "" : ", replay on ", events->replay_endpoint().c_str(),
                 a.kv_events.topic.c_str());
  }
  std::shared_ptr<cluster::RedisKvTier> remote;
  if (!a.kv_remote.url.empty()) {
    AKV_ASSIGN_OR_RETURN(std::unique_ptr<cluster::RedisKvTier> t, cluster::RedisKvTier::start(a.kv_remote));
    remote = std::move(t);
    a.engine.kv_remote = remote;
    auto& reg = http.registry();
    server::Counter& written = reg.counter("agentkv_kv_remote_written_total", "KV blocks written to the remote tier.");
    server::Counter& refs =
        reg.counter("agentkv_kv_remote_segment_refs_written_total",
                    "Segment refs written to the remote tier (a block's name by its tokens alone).");
    server::Counter& wbytes = reg.counter("agentkv_kv_remote_written_bytes_total",
                                          "Bytes written to the remote tier (blocks and segment refs).");
    server::Counter& dropped =
        reg.counter("agentkv_kv_remote_writes_dropped_total",
                    "KV blocks and segment refs not written to the remote tier (down, full, or queue full).");
    server::Counter& errors = reg.counter("agentkv_kv_remote_errors_total",
                                          "Failed remote tier calls (connection lost, timeout, refused).");
    server::Gauge& up = reg.gauge("agentkv_kv_remote_up", "1 while the remote tier answers, else 0.");
    http.add_scrape_hook([&written, &refs, &wbytes, &dropped, &errors, &up, t = remote.get()] {
      const cluster::RedisKvTierStats st = t->stats();
      written.sync_to(static_cast<double>(st.written));
      refs.sync_to(static_cast<double>(st.refs_written));
      wbytes.sync_to(static_cast<double>(st.write_bytes));
      dropped.sync_to(static_cast<double>(st.writes_dropped));
      errors.sync_to(static_cast<double>(st.errors));
      up.set(st.up ? 1 : 0);
    });
    std::fprintf(stderr, "agentkv: remote KV tier %s (ttl %d s)\n", a.kv_remote.url.c_str(), a.kv_remote.ttl_s);
  }
  AKV_ASSIGN_OR_RETURN(const int port, http.start());
  std::fprintf(stderr, "agentkv: loading %s (GET /health answers 503 until ready)\n",
               a.engine.model_path.c_str());
  auto created = create_serving_engine(a.engine);
  if (!created.is_ok()) {
    http.shutdown();
    return created.status();
  }
  engine = std::move(created).value();
  if (a.audit.rate > 0) {
    a.audit.default_scheme = a.engine.kv_sharing;
    a.audit.base_model = a.server.model_name;
    engine = server::make_auditing_engine(std::move(engine), a.audit, http.registry());
    std::fprintf(stderr,
                 "agentkv: fidelity audit of %g of the requests under a sharing scheme (%d positions each)\n",
                 a.audit.rate, a.audit.tokens);
  }
  if (!a.segment_dir.empty()) restore_segments(*engine, a.segment_dir, model_id);
  if (Status st = http.attach(*engine); !st.is_ok()) {
    http.shutdown();
    return st;
  }
  std::fprintf(
      stderr, "agentkv: serving '%s' (max_model_len %d, %d API keys, kv-sharing %s, act-quant %s%s%s)\n",
      a.server.model_name.c_str(), engine->max_model_len(), static_cast<int>(a.server.api_keys.size()),
      a.engine.kv_sharing.c_str(), a.engine.act_quant.c_str(), a.engine.act_quant == "q8" ? " on " : "",
      a.engine.act_quant == "q8" ? backend_cpu_isa() : "");
  for (const ServedModel& m : engine->models()) {
    if (!m.name.empty()) {
      std::fprintf(stderr, "agentkv: adapter '%s' (%s, rank %d, id %s)\n", m.name.c_str(), m.kind.c_str(), m.rank,
                   m.id.c_str());
    }
  }
  if (a.server.enable_lora_loading) {
    std::fprintf(stderr, "agentkv: adapters may be loaded at run time from %s%s\n", a.server.lora_dir.c_str(),
                 a.server.api_keys.empty() ? " by any client (no API keys)" : " with an admin key");
  }
  std::fprintf(stderr, "agentkv: listening on http://%s:%d\n", a.server.host.c_str(), port);
  while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::fprintf(stderr, "agentkv: draining (up to %g s)\n", a.server.shutdown_timeout_s);
  http.drain();
  if (events) events->flush(1.0);  // _Exit below runs no destructor: send the last batches now
  if (!a.segment_dir.empty()) {
    const std::vector<SegmentSpec> segs = engine->frozen_segment_specs();
    Status st = server::save_segments(a.segment_dir, model_id, segs);
    if (st.is_ok()) {
      std::fprintf(stderr, "agentkv: saved %zu frozen segments to %s/%s\n", segs.size(), a.segment_dir.c_str(),
                   server::kSegmentFileName);
    } else {
      std::fprintf(stderr, "agentkv: warning: frozen segments not saved: %s\n", st.message().c_str());
    }
  }
  std::fprintf(stderr, "agentkv: stopped\n");
  // Every request is answered; exit without joining the connection threads.
  std::fflush(nullptr);
  std::_Exit(0);
}

}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  ServingOptions& e = a->engine;
  server::ServerConfig& s = a->server;
  e.model_path = default_model_path();
  e.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  s.model_name.clear();  // default: the model file's stem
  CLI::App* cmd = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  cmd->add_option("-m,--model", e.model_path,
                  "GGUF model file (default: $AGENTKV_MODEL or the SmolLM2 default)")
      ->capture_default_str();
  cmd->add_option("--host", s.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", s.port, "TCP port; 0 picks a free one (printed on stderr)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("-t,--threads", e.n_threads, "compute threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--block-size", e.block_size, "tokens per KV block")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--kv-cache-mb", e.kv_cache_mb, "KV cache budget in MiB (sets the number of blocks)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  add_kv_dtype_option(cmd, &e.kv_dtype);
  add_act_quant_option(cmd, &e.act_quant);
  cmd->add_option("--segment-dir", a->segment_dir,
                  "keep frozen segments across restarts: saved to DIR/segments.json after the drain on SIGTERM, "
                  "recomputed and pinned under their ids at start (a file for another model is a warning and "
                  "is skipped)");
  cmd->add_option("--segment-watermark", e.segment_watermark,
                  "frozen segments (POST /v1/segments) are evicted, least hit first, when used KV blocks "
                  "would exceed this fraction of the pool")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_option("--session-share", e.session_share,
                  "agent sessions (session_id / X-Session-ID) protect at most this fraction of the KV pool from "
                  "eviction, granted in order: past it, new blocks stay ordinary until an earlier session ends or expires")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag(
      "!--no-session-priority", e.session_priority,
      "admit a session's next turn in arrival order with the others, instead of first while its blocks "
      "are protected (at most 4 in a row while another request waits)");
  cmd->add_option("--session-retention-s", a->server.session_retention_s,
                  "how long a session's blocks stay protected after its last request, when the request gives no "
                  "session_retention_s")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--session-max-retention-s", a->server.session_max_retention_s,
                  "the longest session_retention_s a request may ask for (longer is a 400)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-model-len", e.max_model_len,
                  "longest prompt + completion; 0: the model's (at most 32768)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 22));
  cmd->add_option("--max-batch-tokens", e.max_batch_tokens, "token rows per engine step (chunked prefill)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-running", e.max_running, "sequences computed together in one step")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option(
         "--fidelity-audit", a->audit.rate,
         "share of the requests under a KV-sharing scheme re-run exactly at idle priority, their KL and "
         "top-1 agreement against what was served exported in /metrics (agentkv_fidelity_audit_*); 0: off")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--fidelity-audit-tokens", a->audit.tokens, "generated positions each audit compares")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option(
         "--background-rows", e.background_rows,
         "token rows per step that background work (the fidelity audit's re-runs) may take while user "
         "requests run")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--max-queue", e.max_queue, "waiting requests; beyond, requests get HTTP 429")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--no-prefix-caching", a->no_prefix_caching, "do not reuse cached prompt prefixes");
  cmd->add_option("--kv-events", a->kv_events.endpoint,
                  "publish KV cache events in vLLM's format (ZeroMQ PUB, msgpack) for prefix-aware routers: "
                  "tcp://*:5557 binds, tcp://HOST:PORT connects to a subscriber that binds (docs/cluster.md); "
                  "off when unset. The stream carries every tenant's token ids: give it to the operator's router only")
      ->type_name("ENDPOINT");
  cmd->add_option("--kv-events-replay", a->kv_events.replay_endpoint,
                  "ROUTER endpoint (bound) that replays buffered event batches from a sequence number")
      ->type_name("ENDPOINT");
  cmd->add_option("--kv-events-topic", a->kv_events.topic, "topic frame of every event message")
      ->capture_default_str();
  cmd->add_flag("!--no-kv-events-aliases", e.kv_event_aliases,
                "announce base blocks under the base's name only, not also under the aLoRA and ICaRus adapters "
                "that read them (a router then cannot send those adapters to the replica holding the base's prefix)");
  cmd->add_option("--kv-remote", a->kv_remote.url,
                  "share cached KV blocks with other replicas through Redis (or Valkey) at redis://HOST:PORT[/DB]: "
                  "exact blocks are written there, and a prompt whose prefix is not cached here loads it from "
                  "there when that is faster than recomputing; off when unset (docs/cluster.md)")
      ->type_name("URL");
  cmd->add_option("--kv-remote-ttl-s", a->kv_remote.ttl_s, "expiry of each block written to --kv-remote")
      ->capture_default_str()
      ->check(CLI::Range(1, 30 * 24 * 3600));
  cmd->add_option("--kv-remote-wait-s", e.kv_remote_wait_s,
                  "the longest a request waits for its blocks from --kv-remote (less when recomputing them is "
                  "estimated faster)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--kv-events-buffer", a->kv_events.buffer_steps, "event batches kept for replay")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 24));
  cmd->add_option(
      "--api-key", a->api_keys,
      "KEY=TENANT (repeatable): require 'Authorization: Bearer KEY'; the tenant isolates the cache");
  cmd->add_option("--admin-api-key", a->admin_api_keys,
                  "KEY=TENANT (repeatable): an --api-key that may also load and unload adapters");
  cmd->add_flag("--enable-lora-loading", s.enable_lora_loading,
                "allow POST /v1/load_lora_adapter and /v1/unload_lora_adapter (off: they answer 404); needs "
                "--lora-dir, and an --admin-api-key when there are API keys");
  cmd->add_option(
      "--lora-dir", s.lora_dir,
      "the directory adapters may be loaded from at run time; lora_path is taken relative to it and "
      "may not leave it (no '..', no symlink out)");
  cmd->add_option("--served-model-name", s.model_name,
                  "the model name clients send (default: the file's stem)");
  cmd->add_option("--adapter", a->adapters,
                  "NAME=PATH[:lora|:alora|:icarus] (repeatable): serve the PEFT directory or GGUF LoRA file at PATH "
                  "as model NAME; the kind suffix overrides the file's (a PATH may contain ':')")
      ->type_name("NAME=PATH[:KIND]");
  cmd->add_option("--kv-sharing", e.kv_sharing,
                  "default KV-sharing scheme for requests without kv_sharing, one of: " +
                      sharing_scheme_list() + " (docs/usage.md, \"KV-sharing schemes\")")
      ->capture_default_str()
      ->check(kv_sharing_validator());
  // Defaults of the scheme parameters, one flag per field (sharing/param_flags.h);
  // a request's kv_sharing object overrides them.
  add_kv_sharing_flags(cmd, &e.kv_sharing_params);
  cmd->add_option("--relay-profile", e.relay_profile,
                  "relay: the layer profile of this model (agentkv profile-relay writes one); its l_start, l_det and "
                  "l_end become the defaults, and hidden states are captured at l_start")
      ->check(CLI::ExistingFile);
  cmd->add_option("--relay-capture", e.relay_capture,
                  "relay captures (hidden state at l_start, influence of generated tokens): on-request (for "
                  "requests under relay), all (every request), off (no memory kept for them)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "on-request", "all"}));
  cmd->add_option("--lr-cache-rank", e.lr_cache_rank,
                  "LRAgent's LR cache (lragent-base, lragent-baselr): v_proj LoRA ranks up to this; it takes " +
                      std::to_string(kLrBlocksPerKvBlock) + " LR blocks per K/V block of --kv-cache-mb (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  cmd->add_flag_function(
      "--no-flash-lora", [&e](int64_t) { e.flash_lora = false; },
      "LRAgent: attend over V expanded from the LR cache each step instead of Flash-LoRA-Attention (for comparison)");
  cmd->add_option(
         "--profile-dir", a->profile_dir,
         "where --relay-profile and --droidspeak-profile are looked for by model id when not given (their "
         "layers become the defaults; hidden-state snapshots only where --kv-sharing is that scheme); '' "
         "looks nowhere")
      ->capture_default_str();
  cmd->add_option(
         "--droidspeak-profile", e.droidspeak_profile,
         "droidspeak: the critical-layer profile of this model (agentkv profile-droidspeak writes one); its "
         "layers become the default")
      ->check(CLI::ExistingFile);
  cmd->add_option("--chat-template", s.chat_template,
                  "chatml, llama3 or mistral (default: from the model file)");
  cmd->add_option(
         "--tool-format", s.tool_format,
         "how tools and calls are written: hermes, llama3 or mistral (default: the template's own when it "
         "renders tools, else hermes)")
      ->check(CLI::IsMember({"hermes", "llama3", "mistral"}));
  cmd->add_option("--shutdown-timeout", s.shutdown_timeout_s,
                  "seconds a SIGTERM lets running requests finish")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  server::ConnectionLimits& c = s.connections;
  cmd->add_option("--max-connections,--http-threads", c.max_connections,
                  "open connections at most (each has a thread); past it a new connection gets 503")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 16));
  cmd->add_option("--header-timeout", c.timeouts.header_s,
                  "seconds a client has to send a request's line and headers (the first request's count from "
                  "the connection)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--body-timeout", c.timeouts.body_s,
                  "seconds a client has to send a request body, once its "
                  "headers are in")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--keep-alive-timeout", c.timeouts.keep_alive_s,
                  "seconds an idle keep-alive connection waits for its next request")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option(
      "--config", a->config_path,
      "JSON object of flag values, e.g. {\"port\": 8001, \"api-key\": [\"k1=t1\"], \"adapters\": "
      "[{\"name\": \"a\", \"path\": \"/p\", \"kind\": \"alora\"}], \"kv_sharing\": \"alora\"}; flags override it");
  cmd->callback([a, cmd] {
    if (Status st = serve(*a, cmd); !st.is_ok()) fail(st);
  });
}

}  // namespace agentkv::cli
