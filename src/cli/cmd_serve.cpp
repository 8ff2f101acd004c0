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
#include "cli/serve_args.h"
#include "cluster/kv_event_publisher.h"
#include "cluster/redis_kv_tier.h"
#include "server/adapter_path.h"
#include "server/fidelity_audit.h"
#include "server/http_server.h"
#include "server/segment_store.h"
#include "server/serve_config.h"
#include "sharing/profile_dir.h"
#include "sharing/scheme.h"
#include "sharing/scheme_defaults.h"
#include "util/file_id.h"

namespace agentkv::cli {

namespace {

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
  if (a.no_scheme_defaults && !a.engine.scheme_defaults.empty()) {
    // (the command line's excludes() cannot see a config file's entry)
    return make_error(ErrorCode::kInvalidArgument, "--no-scheme-defaults and --scheme-defaults (",
                      a.engine.scheme_defaults, ") exclude each other");
  }
  const bool defaults = a.engine.scheme_defaults.empty() && !a.no_scheme_defaults;
  if (a.profile_dir.empty() || (!relay && !droidspeak && !defaults)) return Status::ok();
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
  if (defaults) {
    a.engine.scheme_defaults =
        find_profile(a.profile_dir, kSchemeDefaultsSuffix, kSchemeDefaultsFormat, *model_id);
    if (a.engine.scheme_defaults.empty()) {
      std::fprintf(
          stderr, "agentkv: no scheme defaults of this model in '%s': the schemes' built-in defaults apply\n",
          a.profile_dir.c_str());
    } else {
      std::fprintf(stderr, "agentkv: scheme defaults %s (found by model id)\n",
                   a.engine.scheme_defaults.c_str());
    }
  }
  return Status::ok();
}

// The arguments checked and completed before anything starts: the config
// file, keys, adapters, the model's content id (with --segment-dir) and the
// schemes' profiles.
Status prepare_serve(ServeArgs& a, CLI::App* cmd, std::string* model_id) {
  if (!a.config_path.empty()) AKV_RETURN_IF_ERROR(apply_config_file(cmd, a, a.config_path));
  AKV_RETURN_IF_ERROR(parse_api_keys(a, a.server));
  AKV_RETURN_IF_ERROR(check_lora_loading(a.server));
  fit_fd_limit(a.server);
  AKV_RETURN_IF_ERROR(server::check_kv_sharing(a.engine.kv_sharing));
  a.engine.prefix_caching = !a.no_prefix_caching;
  if (a.server.model_name.empty())
    a.server.model_name = std::filesystem::path(a.engine.model_path).stem().string();
  AKV_RETURN_IF_ERROR(resolve_adapters(a));
  if (!a.segment_dir.empty()) {
    AKV_RETURN_IF_ERROR(server::check_segment_dir(a.segment_dir));
    AKV_ASSIGN_OR_RETURN(*model_id, file_content_id(a.engine.model_path));
  }
  AKV_RETURN_IF_ERROR(find_profiles(a, model_id));
  if (a.kv_events.endpoint.empty() && !a.kv_events.replay_endpoint.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "--kv-events-replay needs --kv-events");
  }
  return Status::ok();
}

// --kv-events: the publisher the engine feeds, and its counters in /metrics.
Result<std::unique_ptr<cluster::KvEventPublisher>> start_kv_events(ServeArgs& a, server::HttpServer& http) {
  AKV_ASSIGN_OR_RETURN(std::unique_ptr<cluster::KvEventPublisher> events,
                       cluster::KvEventPublisher::start(a.kv_events));
  a.engine.kv_events = [p = events.get()](KvEventBatch&& b) { p->publish(std::move(b)); };
  server::Counter& sent = http.registry().counter("agentkv_kv_events_published_total",
                                                  "KV cache event batches sent on the PUB socket.");
  server::Counter& dropped =
      http.registry().counter("agentkv_kv_events_dropped_total",
                              "KV cache event batches dropped because the publisher's queue was full.");
  http.add_scrape_hook([&sent, &dropped, p = events.get()] {
    sent.sync_to(static_cast<double>(p->n_published()));
    dropped.sync_to(static_cast<double>(p->n_dropped()));
  });
  std::fprintf(stderr, "agentkv: KV cache events on %s%s%s (topic '%s')\n", events->endpoint().c_str(),
               events->replay_endpoint().empty() ? "" : ", replay on ", events->replay_endpoint().c_str(),
               a.kv_events.topic.c_str());
  return events;
}

// --kv-remote: the Redis tier the engine reads and writes, and its counters.
Result<std::shared_ptr<cluster::RedisKvTier>> start_kv_remote(ServeArgs& a, server::HttpServer& http) {
  AKV_ASSIGN_OR_RETURN(std::unique_ptr<cluster::RedisKvTier> t, cluster::RedisKvTier::start(a.kv_remote));
  std::shared_ptr<cluster::RedisKvTier> remote = std::move(t);
  a.engine.kv_remote = remote;
  auto& reg = http.registry();
  server::Counter& written =
      reg.counter("agentkv_kv_remote_written_total", "KV blocks written to the remote tier.");
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
  return remote;
}

// What the server serves and where, on stderr.
void announce(const ServeArgs& a, ServingEngine& engine, int port) {
  std::fprintf(
      stderr, "agentkv: serving '%s' (max_model_len %d, %d API keys, kv-sharing %s, act-quant %s%s%s)\n",
      a.server.model_name.c_str(), engine.max_model_len(), static_cast<int>(a.server.api_keys.size()),
      a.engine.kv_sharing.c_str(), a.engine.act_quant.c_str(), a.engine.act_quant == "q8" ? " on " : "",
      a.engine.act_quant == "q8" ? backend_cpu_isa() : "");
  if (const int64_t b = engine.stats().prepacked_weight_bytes; b > 0) {
    std::fprintf(stderr, "agentkv: --prepack-weights: %lld MiB of weights laid out for the q8 kernels\n",
                 static_cast<long long>(b >> 20));
  }
  for (const ServedModel& m : engine.models()) {
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
}

// After SIGTERM: drains, sends the last events, saves the frozen segments
// and exits 0 without joining the connection threads.
[[noreturn]] void drain_and_exit(const ServeArgs& a, server::HttpServer& http, ServingEngine& engine,
                                 cluster::KvEventPublisher* events, const std::string& model_id) {
  std::fprintf(stderr, "agentkv: draining (up to %g s)\n", a.server.shutdown_timeout_s);
  http.drain();
  if (events) events->flush(1.0);  // _Exit below runs no destructor: send the last batches now
  if (!a.segment_dir.empty()) {
    const std::vector<SegmentSpec> segs = engine.frozen_segment_specs();
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

Status serve(ServeArgs& a, CLI::App* cmd) {
  std::string model_id;  // the GGUF's content id, with --segment-dir: names the model the segments are for
  AKV_RETURN_IF_ERROR(prepare_serve(a, cmd, &model_id));
  install_signal_handlers();
  std::unique_ptr<cluster::KvEventPublisher> events;  // outlives the engine, which feeds it
  std::unique_ptr<ServingEngine> engine;              // outlives the server below
  server::HttpServer http(a.server);
  if (!a.kv_events.endpoint.empty()) {
    AKV_ASSIGN_OR_RETURN(events, start_kv_events(a, http));
  }
  std::shared_ptr<cluster::RedisKvTier> remote;
  if (!a.kv_remote.url.empty()) {
    AKV_ASSIGN_OR_RETURN(remote, start_kv_remote(a, http));
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
  std::fprintf(stderr, "agentkv: %s\n", http.chat_summary().c_str());
  announce(a, *engine, port);
  while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  drain_and_exit(a, http, *engine, events.get(), model_id);
}

}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  a->engine.model_path = default_model_path();
  a->engine.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  a->server.model_name.clear();  // default: the model file's stem
  CLI::App* cmd = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  add_serve_flags(cmd, a.get());
  cmd->callback([a, cmd] {
    if (Status st = serve(*a, cmd); !st.is_ok()) fail(st);
  });
}

}  // namespace agentkv::cli
