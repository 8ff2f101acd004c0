// `agentkv serve`'s flags, in groups (serve --help lists them in this order).
#include <string>

#include "cli/common.h"
#include "cli/serve_args.h"
#include "sharing/scheme.h"

namespace agentkv::cli {

namespace {

// The model, the listening address, threads and the KV cache's size and types.
void add_model_flags(CLI::App* cmd, ServeArgs* a) {
  ServingOptions& e = a->engine;
  server::ServerConfig& s = a->server;
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
  add_prepack_option(cmd, &e.prepack_weights, &e.decode_layout);
}

// Frozen segments and agent sessions.
void add_cache_flags(CLI::App* cmd, ServeArgs* a) {
  ServingOptions& e = a->engine;
  cmd->add_option(
      "--segment-dir", a->segment_dir,
      "keep frozen segments across restarts: saved to DIR/segments.json after the drain on SIGTERM, "
      "recomputed and pinned under their ids at start (a file for another model is a warning and "
      "is skipped)");
  cmd->add_option("--segment-watermark", e.segment_watermark,
                  "frozen segments (POST /v1/segments) are evicted, least hit first, when used KV blocks "
                  "would exceed this fraction of the pool")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_option(
         "--session-share", e.session_share,
         "agent sessions (session_id / X-Session-ID) protect at most this fraction of the KV pool from "
         "eviction, granted in order: past it, new blocks stay ordinary until an earlier session ends or "
         "expires")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag(
      "!--no-session-priority", e.session_priority,
      "admit a session's next turn in arrival order with the others, instead of first while its blocks "
      "are protected (at most 4 in a row while another request waits)");
  cmd->add_option(
         "--session-retention-s", a->server.session_retention_s,
         "how long a session's blocks stay protected after its last request, when the request gives no "
         "session_retention_s")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--session-max-retention-s", a->server.session_max_retention_s,
                  "the longest session_retention_s a request may ask for (longer is a 400)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

// Lengths, batch and queue limits, prefix caching and the fidelity audit.
void add_limit_flags(CLI::App* cmd, ServeArgs* a) {
  ServingOptions& e = a->engine;
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
  cmd->add_option(
         "--background-reserve", e.background_reserve,
         "token rows per step (at most --max-batch-tokens - 1) held back from user requests while "
         "background work (the fidelity audit's re-runs) waits or runs, so that it runs under a load that "
         "never idles; 0: it runs only in what the load leaves")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--max-queue", e.max_queue, "waiting requests; beyond, requests get HTTP 429")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--no-prefix-caching", a->no_prefix_caching, "do not reuse cached prompt prefixes");
}

// KV cache events for routers and the remote KV tier (docs/cluster.md).
void add_cluster_flags(CLI::App* cmd, ServeArgs* a) {
  ServingOptions& e = a->engine;
  cmd->add_option(
         "--kv-events", a->kv_events.endpoint,
         "publish KV cache events in vLLM's format (ZeroMQ PUB, msgpack) for prefix-aware routers: "
         "tcp://*:5557 binds, tcp://HOST:PORT connects to a subscriber that binds (docs/cluster.md); "
         "off when unset. The stream carries every tenant's token ids: give it to the operator's router only")
      ->type_name("ENDPOINT");
  cmd->add_option("--kv-events-replay", a->kv_events.replay_endpoint,
                  "ROUTER endpoint (bound) that replays buffered event batches from a sequence number")
      ->type_name("ENDPOINT");
  cmd->add_option("--kv-events-topic", a->kv_events.topic, "topic frame of every event message")
      ->capture_default_str();
  cmd->add_flag(
      "!--no-kv-events-aliases", e.kv_event_aliases,
      "announce base blocks under the base's name only, not also under the aLoRA and ICaRus adapters "
      "that read them (a router then cannot send those adapters to the replica holding the base's prefix)");
  cmd->add_option(
         "--kv-remote", a->kv_remote.url,
         "share cached KV blocks with other replicas through Redis (or Valkey) at redis://HOST:PORT[/DB]: "
         "exact blocks are written there, and a prompt whose prefix is not cached here loads it from "
         "there when that is faster than recomputing; off when unset (docs/cluster.md)")
      ->type_name("URL");
  cmd->add_option("--kv-remote-ttl-s", a->kv_remote.ttl_s, "expiry of each block written to --kv-remote")
      ->capture_default_str()
      ->check(CLI::Range(1, 30 * 24 * 3600));
  cmd->add_option(
         "--kv-remote-wait-s", e.kv_remote_wait_s,
         "the longest a request waits for its blocks from --kv-remote (less when recomputing them is "
         "estimated faster)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--kv-events-buffer", a->kv_events.buffer_steps, "event batches kept for replay")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 24));
}

// API keys, run-time adapter loading and the served models.
void add_access_flags(CLI::App* cmd, ServeArgs* a) {
  server::ServerConfig& s = a->server;
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
  cmd->add_option(
         "--adapter", a->adapters,
         "NAME=PATH[:lora|:alora|:icarus] (repeatable): serve the PEFT directory or GGUF LoRA file at PATH "
         "as model NAME; the kind suffix overrides the file's (a PATH may contain ':')")
      ->type_name("NAME=PATH[:KIND]");
}

// The default KV-sharing scheme, its parameters and the schemes' profiles and caches.
void add_scheme_flags(CLI::App* cmd, ServeArgs* a) {
  ServingOptions& e = a->engine;
  cmd->add_option("--kv-sharing", e.kv_sharing,
                  "default KV-sharing scheme for requests without kv_sharing, one of: " +
                      sharing_scheme_list() + " (docs/usage.md, \"KV-sharing schemes\")")
      ->capture_default_str()
      ->check(kv_sharing_validator());
  // Defaults of the scheme parameters, one flag per field (sharing/param_flags.h);
  // a request's kv_sharing object overrides them.
  add_kv_sharing_flags(cmd, &e.kv_sharing_params);
  cmd->add_option(
         "--relay-profile", e.relay_profile,
         "relay: the layer profile of this model (agentkv profile-relay writes one); its l_start, l_det and "
         "l_end become the defaults, and hidden states are captured at l_start")
      ->check(CLI::ExistingFile);
  cmd->add_option("--relay-capture", e.relay_capture,
                  "relay captures (hidden state at l_start, influence of generated tokens): on-request (for "
                  "requests under relay), all (every request), off (no memory kept for them)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "on-request", "all"}));
  cmd->add_option(
         "--lr-cache-rank", e.lr_cache_rank,
         "LRAgent's LR cache (lragent-base, lragent-baselr): v_proj LoRA ranks up to this; it takes " +
             std::to_string(kLrBlocksPerKvBlock) + " LR blocks per K/V block of --kv-cache-mb (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  cmd->add_flag_function(
      "--no-flash-lora", [&e](int64_t) { e.flash_lora = false; },
      "LRAgent: attend over V expanded from the LR cache each step instead of Flash-LoRA-Attention (for "
      "comparison)");
  cmd->add_option("--profile-dir", a->profile_dir,
                  "where --relay-profile, --droidspeak-profile and --scheme-defaults are looked for by model "
                  "id when not given (their layers and settings become the defaults; hidden-state snapshots "
                  "only where --kv-sharing is that scheme); '' looks nowhere")
      ->capture_default_str();
  cmd->add_option("--scheme-defaults", e.scheme_defaults,
                  "per-model defaults of the scheme parameters (tools/scheme_defaults.py writes one from a "
                  "bench-fidelity run of this model): each scheme's setting chosen on this model's curve, "
                  "below a request's own and the flags above")
      ->check(CLI::ExistingFile);
  cmd->add_flag(
         "--no-scheme-defaults", a->no_scheme_defaults,
         "no per-model defaults file, given or found: the schemes' built-in defaults, as the benches run "
         "them (scripts/audit_vs_bench.py replays a bench so)")
      ->excludes("--scheme-defaults");
  cmd->add_option(
         "--droidspeak-profile", e.droidspeak_profile,
         "droidspeak: the critical-layer profile of this model (agentkv profile-droidspeak writes one); its "
         "layers become the default")
      ->check(CLI::ExistingFile);
}

// Chat and tool formats, shutdown, connection limits and the config file.
void add_http_flags(CLI::App* cmd, ServeArgs* a) {
  server::ServerConfig& s = a->server;
  cmd->add_option("--chat-template", s.chat_template,
                  "the model file's own Jinja template by default (a built-in chatml when it has none); "
                  "chatml, llama3, mistral or gemma for a built-in; or the path of a .jinja file");
  cmd->add_option(
         "--tool-format", s.tool_format,
         "how tools and calls are written: hermes, llama3 or mistral (default: the template's own when it "
         "renders tools, else hermes)")
      ->check(CLI::IsMember({"hermes", "llama3", "mistral"}));
  cmd->add_flag("!--no-bare-tool-calls", s.bare_tool_calls,
                "with tool_choice auto in the hermes format, do not take a bare JSON object naming a tool "
                "({\"name\": \"TOOL\", ...} without <tool_call>) as a call");
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
  cmd->add_option("--config", a->config_path,
                  "JSON object of flag values, e.g. {\"port\": 8001, \"api-key\": [\"k1=t1\"], \"adapters\": "
                  "[{\"name\": \"a\", \"path\": \"/p\", \"kind\": \"alora\"}], \"kv_sharing\": \"alora\"}; "
                  "flags override it");
}

}  // namespace

void add_serve_flags(CLI::App* cmd, ServeArgs* a) {
  add_model_flags(cmd, a);
  add_cache_flags(cmd, a);
  add_limit_flags(cmd, a);
  add_cluster_flags(cmd, a);
  add_access_flags(cmd, a);
  add_scheme_flags(cmd, a);
  add_http_flags(cmd, a);
}

}  // namespace agentkv::cli
