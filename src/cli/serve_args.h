// `agentkv serve`'s arguments: the engine's and the HTTP server's options,
// and what the command itself does with the rest.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "agentkv/serving.h"
#include "cluster/kv_event_publisher.h"
#include "cluster/redis_kv_tier.h"
#include "server/fidelity_audit.h"
#include "server/http_server.h"

namespace agentkv::cli {

struct ServeArgs {
  ServingOptions engine;
  server::ServerConfig server;
  std::vector<std::string> api_keys;                         // KEY=TENANT
  std::vector<std::string> admin_api_keys;                   // KEY=TENANT, may also load and unload adapters
  std::vector<std::string> adapters;                         // NAME=PATH[:kind], from the command line
  std::vector<ServingOptions::AdapterSpec> config_adapters;  // from --config, used without --adapter
  std::string segment_dir;  // --segment-dir: frozen segments saved at shutdown, restored at start
  std::string config_path;
  std::string profile_dir = "profiles";  // --profile-dir: relay/droidspeak profiles found by model id
  bool no_scheme_defaults = false;       // --no-scheme-defaults: no per-model defaults file
  bool no_prefix_caching = false;
  cluster::KvEventPublisherOptions kv_events;  // endpoint "": no KV cache events
  cluster::RedisKvTierOptions kv_remote;       // url "": no remote tier
  server::FidelityAuditConfig audit;           // rate 0: no audit
};

// Adds every flag of `agentkv serve` (serve_flags.cpp), each setting its field of *a.
void add_serve_flags(CLI::App* cmd, ServeArgs* a);

}  // namespace agentkv::cli
