// The asynchronous serving API that the HTTP server (and load benchmarks) use:
// submit requests, receive their tokens as events, cancel, drain. One engine
// thread runs continuous batching behind it (src/sched + src/runtime).
//
// ServingEngine is an interface so the server can be tested against a fake;
// create_serving_engine() returns the real one.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agentkv/constraint.h"
#include "agentkv/kv_events.h"
#include "agentkv/kv_remote.h"
#include "agentkv/kv_sharing_params.h"
#include "agentkv/sampling.h"
#include "agentkv/status.h"

namespace agentkv {

class Tokenizer;
struct ServeRequestHooks;

using ServeId = uint64_t;

struct ServeRequest {
  std::vector<int32_t> prompt;     // token ids, non-empty
  SamplingParams sampling;         // n_logprobs > 0 fills TokenEvent::samples[i].top
  int32_t max_tokens = 256;        // clipped to the context left after the prompt
  std::vector<std::string> stop;   // stop strings (never emitted)
  std::vector<int32_t> stop_token_ids;  // ids that end generation like end-of-generation (never emitted)
  bool ignore_eos = false;
  // Constrained decoding: the generated tokens must match this grammar
  // (null: free). Each token's mask is applied after logit_bias and the
  // penalties; an end-of-generation token ends the request only where the
  // grammar is complete (and then even with ignore_eos).
  std::shared_ptr<const TokenConstraint> constraint;
  // Agent session (docs/usage.md, "Agent sessions"): the blocks this request
  // wrote or read stay protected from eviction for session_retention_s after
  // it finishes (renewed by each request of the session). Scoped to `tenant`.
  std::string session_id;
  double session_retention_s = 0;
  // >= 0: report every prompt token's logprob (and this many alternatives)
  // on the first event, as OpenAI's completions echo + logprobs. Such a
  // request reads nothing from the prefix cache (a cached token has no
  // logits), though it still writes its blocks for others. -1: off.
  int32_t prompt_logprobs = -1;
  // Cache namespace: blocks are shared only between requests with equal
  // (tenant, cache_salt). Both are opaque strings; empty is a valid value.
  std::string tenant;
  std::string cache_salt;
  // The agent: "" = the base model, else a registered adapter's name
  // (kNotFound when unknown).
  std::string adapter;
  // KV-sharing scheme for this request: "" = the engine's default, else a
  // name the scheme registry knows (a scheme, or an exact adapter scheme
  // composed with a segment-reuse one: sharing_scheme_find() in
  // src/sharing/scheme.h; docs/usage.md, "KV-sharing schemes"), and
  // kInvalidArgument otherwise, with the reason. Segment reuse is off for
  // requests with prompt_logprobs.
  std::string kv_sharing;
  // The scheme's parameters; unset ones take the engine's defaults. One the
  // scheme does not take, or a value out of range, is kInvalidArgument.
  KvSharingParams kv_sharing_params;
  // Benchmark and test hooks (teacher forcing, raw logits, idle priority,
  // K/V probes): declared in the engine's internal runtime/request_hooks.h,
  // set by agentkv's own tools and tests, null for everyone else.
  std::shared_ptr<const ServeRequestHooks> hooks;
};

enum class ServeFinish { kNone, kStop, kLength, kCancelled, kError };

// Everything a client sees of a request, delivered in order. Each event holds
// the tokens sampled since the previous event and the text they released
// (text may lag tokens: a possible stop string or a split UTF-8 character is
// held back). The last event has finish != kNone.
struct ServeEvent {
  std::vector<SampleResult> samples;  // one per new token (id, logprob, top)
  // First event, with ServeRequest::prompt_logprobs >= 0: one per prompt
  // token from the second on (the first has no context to be scored in).
  std::vector<SampleResult> prompt_logprobs;
  std::string text;                   // new text, never part of a stop string
  ServeFinish finish = ServeFinish::kNone;
  std::string error;                  // kError only: what went wrong
  // Filled on the first event (the first token) and on the last one:
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;          // prompt tokens served from the prefix cache
  int32_t reused_tokens = 0;          // prompt tokens whose K/V came from a cached segment (segment reuse)
  int64_t prefill_token_layers = 0;   // K/V entries the prompt's prefill computed (rows x layers)
  // Share of the K/V entries (token x layer) of the prompt positions this
  // request prefilled that were copied from segments instead of computed
  // (segment reuse; prefix-cache hits count in neither); 0 without reuse.
  double reuse_rate = 0;
  // lragent-baselr for an adapter in no shared-A group: served by BaseShared rules.
  bool lr_fallback = false;
  int32_t completion_tokens = 0;      // on the last event: tokens generated in all
  std::string kv_sharing;             // the scheme applied: the one asked for, or "none" when it does
                                      // not apply to the adapter's kind (ICaRus for a plain LoRA)
  double queue_s = 0;                 // submit -> first scheduled
  double ttft_s = 0;                  // submit -> first token
  // ServeRequestHooks::return_logits only: the n_vocab raw logits the event's
  // token was sampled from (also when that token ended the request unemitted,
  // e.g. end-of-generation).
  std::vector<float> logits;
};

// Called on the engine thread. It must not block and must not call back into
// the engine (queue the event and return).
using ServeSink = std::function<void(ServeEvent&&)>;

// LR blocks per K/V block in the budget: an LR cache per agent of LRAgent's
// three-agent team (plan, action, reflect) under BaseShared.
inline constexpr int32_t kLrBlocksPerKvBlock = 3;

struct ServingOptions {
  std::string model_path;
  int n_threads = 2;
  int32_t block_size = 16;
  int64_t kv_cache_mb = 256;          // KV pool budget; sets the number of blocks
  // Element type of the K/V cache: "f16" (half the bytes of f32 per token),
  // "bf16" or "f32" (what the float64 reference tests compare against).
  std::string kv_dtype = "f16";
  // Activations of products with q4_0, q4_1 and q8_0 weights: "q8" (8-bit
  // blocks and integer dot products, llama.cpp's arithmetic: the default, and
  // faster) or "f32" (exact product with the dequantized weights: the
  // reference mode the float64 checks use; about 1e-3 apart on the logits).
  // Exact schemes are bitwise in either mode.
  std::string act_quant = "q8";
  // q8 only: lay the layer weights out once at start for the prefill
  // kernels (their panels), instead of per prefill call. The same bits;
  // prefill does less work per call; the weights take 40 bytes per 32
  // values more for q4_1 (2x its file's), 36 for q4_0 (2x) and q8_0 (1.06x),
  // not counted in the KV budget. Logged at start with its size.
  bool prepack_weights = false;
  // q8 only (and not on the scalar kernels): hold q4_K and q6_K matrices
  // (an untied output matrix included) in records of eight rows that the
  // decode kernels read with no horizontal reduction, in place of the
  // file's blocks: one copy, 1.03x the file's bytes for q4_K, the same for
  // q6_K. The same bits. Off: the file's blocks (--no-decode-layout).
  bool decode_layout = true;
  int64_t kv_cache_tokens = 0;        // > 0: the pool holds this many tokens (in whole blocks) instead;
                                      // the CLI's --ctx-size
  int32_t max_model_len = 0;          // 0: the model's context length (capped at 32768)
  int32_t max_batch_tokens = 512;     // token rows per step (chunked prefill)
  int32_t max_running = 64;           // sequences in one step
  int32_t background_rows = 32;       // rows per step background requests may take while others run
  // Rows per step held back from user requests while background work waits
  // or runs, so that it runs under saturation too: one background request at
  // a time then, beside max_running. Admissions wait for its blocks; a
  // running user request short of blocks preempts the latest admitted user
  // request (itself, if it is the latest) while another runs, and takes the
  // background request's only when it is the only user request left. 0: it
  // runs only in what the load leaves, and gives its blocks first. 16:
  // measured in docs/benchmarks.md, "The fidelity audit under saturation".
  int32_t background_reserve = 16;
  int32_t max_queue = 256;            // waiting requests; beyond, submit fails kResourceExhausted
  bool prefix_caching = true;
  std::string kv_sharing = "none";    // default scheme: a name sharing_scheme_find() knows
  KvSharingParams kv_sharing_params;  // defaults of the schemes' parameters (unset: the schemes' own)
  // A per-model defaults file (sharing/scheme_defaults.h; "" = none): per
  // scheme, its parameters chosen on this model's fidelity curve. They apply
  // where neither the request nor kv_sharing_params sets a field.
  std::string scheme_defaults;
  // Frozen segments are evicted, least hit first, when an allocation would
  // put the used KV blocks (frozen ones included) above this fraction of the pool.
  double segment_watermark = 0.9;
  // Agent sessions protect at most this share of the KV pool, granted in
  // order (session_table.h).
  double session_share = 0.5;
  // The next turn of a session whose blocks are protected is admitted before
  // the other waiting requests (at most 4 in a row while another waits:
  // SchedulerConfig::priority_streak), so an agent back from a tool finds
  // its cache before the queue pushes it out.
  bool session_priority = true;
  // KV cache events (kv_events.h) for prefix-aware routers: set, the engine
  // hands it one batch per step that changed the prefix cache, starting with
  // AllBlocksCleared. Unset: none are made.
  KvEventSink kv_events;
  // Announce blocks under every model the default scheme lets read them
  // (base blocks under aLoRA and ICaRus adapters; kv_event_source.h). Off:
  // one name per block.
  bool kv_event_aliases = true;
  // A shared tier of cached KV blocks (kv_remote.h; Redis): exact blocks are
  // written to it, and a prompt whose prefix is not cached here waits up to
  // kv_remote_wait_s (less when recomputing it is estimated cheaper) for its
  // blocks from it. Unset: none.
  std::shared_ptr<KvRemoteTier> kv_remote;
  double kv_remote_wait_s = 2.0;
  // RelayCaching captures (KV components: the hidden state entering the
  // relay's l_start and the influence score of every token): "on-request"
  // keeps room for them and captures for requests under kv_sharing relay,
  // "all" captures for every request, "off" keeps no room (relay then
  // recomputes its band from layer 0). Their memory counts in the KV budget.
  std::string relay_capture = "on-request";
  // A relay layer profile (agentkv profile-relay) for this model: its layers
  // become the defaults of l_start, l_det and l_end. "" = none.
  std::string relay_profile;
  // A DroidSpeak profile (agentkv profile-droidspeak) for this model: its
  // critical layers become droidspeak's default (unless
  // kv_sharing_params.critical_layers is set).
  std::string droidspeak_profile;
  // Room for hidden-state snapshots at the layer where the defaults above
  // start (relay's l_start, droidspeak's first critical layer), so that a
  // request under that scheme recomputes from there instead of from layer 0.
  // Each costs d_model floats per token of the pool: about a tenth of a
  // block's f16 K/V on SmolLM2-135M. serve turns them off for a profile it
  // found by model id (--profile-dir) rather than was given.
  bool relay_snapshots = true;
  bool droidspeak_snapshots = true;
  // LRAgent's LR cache (lragent-base, lragent-baselr): room for v_proj LoRA
  // ranks up to this (0: no LR cache; those schemes then refuse requests).
  // It takes kLrBlocksPerKvBlock LR blocks per K/V block of the budget.
  int32_t lr_cache_rank = 8;
  // Attention reads the LR cache with Flash-LoRA-Attention (true) or over V
  // expanded per step (false: what an engine without it does; benchmarks).
  bool flash_lora = true;
  // Adapters registered at start: name, path (PEFT dir or GGUF LoRA), kind
  // override ("" = from the file; "lora", "alora", "icarus").
  struct AdapterSpec {
    std::string name, path, kind;
  };
  std::vector<AdapterSpec> adapters;
};

// A model the engine serves: the base or an adapter.
struct ServedModel {
  std::string name;   // "" for the base
  std::string kind;   // "base", "lora", "alora", "icarus"
  std::string id;     // adapter content hash ("" for the base)
  int32_t rank = 0;
  // LRAgent's shared-A group: the v_proj A id and the other adapters with
  // that very A; empty when it shares with none (lragent-baselr then keeps
  // BaseShared rules for it).
  std::string shared_a_group;
  std::vector<std::string> shared_a_with;
};

// Per-adapter counters (cumulative), and cached prompt tokens per scheme.
struct AdapterStats {
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
};

struct ServingStats {
  int32_t n_waiting = 0;
  int32_t n_running = 0;
  int32_t kv_blocks_used = 0;
  int32_t kv_blocks_cached = 0;
  int32_t kv_blocks_free = 0;
  int32_t kv_blocks_total = 0;
  int64_t kv_bytes_per_block = 0;    // K/V and the components kept with it (not the LR cache)
  int64_t prepacked_weight_bytes = 0;  // ServingOptions::prepack_weights: the layout's bytes (0: off)
  int32_t lr_blocks_used = 0;         // LRAgent's LR cache: held, cached (evictable) and all blocks
  int32_t lr_blocks_cached = 0;
  int32_t lr_blocks_total = 0;
  int32_t lr_blocks_protected = 0;  // LR cache blocks agent sessions protect
  int64_t lr_bytes_per_block = 0;
  int64_t lr_fallback_requests = 0;   // cumulative: lragent-baselr requests served by BaseShared rules
  int64_t prefix_hit_tokens = 0;      // cumulative
  int64_t prompt_tokens = 0;          // cumulative, admitted requests
  int64_t preemptions = 0;            // cumulative
  int64_t steps = 0;                  // cumulative
  // The most K/V entries (token rows x layers) one step has computed: a
  // step stays within --max-batch-tokens x layers, past it only by the
  // selection layer of a whole prompt (about n_prompt / layers token rows).
  int64_t max_step_token_layers = 0;
  std::map<std::string, AdapterStats> per_model;        // by adapter name, "" = base
  std::map<std::string, int64_t> cached_tokens_by_scheme;  // by scheme name
  std::map<std::string, int64_t> prompt_tokens_by_scheme;
  std::map<std::string, int64_t> reused_tokens_by_scheme;       // segment reuse: prompt tokens copied
  std::map<std::string, int64_t> computed_token_layers_by_scheme;  // K/V entries computed (rows x layers)
  // Segment reuse: K/V entries of prefilled prompt positions copied instead of computed.
  std::map<std::string, int64_t> reused_token_layers_by_scheme;
  int32_t frozen_segments = 0;        // frozen (pinned) segments now
  int32_t frozen_blocks = 0;          // distinct KV blocks they pin
  int64_t segment_evictions = 0;      // cumulative: frozen segments evicted above the watermark
  int32_t live_sessions = 0;          // agent sessions with time left
  int32_t protected_blocks = 0;       // KV blocks a session protects
  int64_t protected_hits = 0;         // cumulative: prefix and segment hits on protected blocks
  int32_t prefix_blocks = 0;          // blocks registered in the prefix index (exact and approximate)
  int64_t kv_event_hashes = 0;        // KV cache events: hashes announced and not removed (aliases too)
  // The remote KV tier (cumulative): requests that asked it, blocks loaded
  // from it and their bytes, values that did not verify, and requests that
  // stopped waiting for it and recomputed.
  int64_t remote_lookups = 0;
  int64_t remote_blocks_loaded = 0;
  int64_t remote_bytes_loaded = 0;
  int64_t remote_invalid = 0;
  int64_t remote_timeouts = 0;
};

// A frozen segment (SparseX §4's knowledge base): a run of tokens whose KV
// the engine computes once, from position 0, and pins, so that later prompts
// of the same namespace reuse it at any offset (kv_sharing naive, epic,
// cacheblend) or as a prefix (any scheme). Only its full blocks are pinned.
struct SegmentSpec {
  std::vector<int32_t> tokens;  // at least one KV block's worth
  std::string tenant;           // namespace, as ServeRequest's
  std::string cache_salt;
  // Empty: the engine names the segment "seg-<n>". Set when a saved segment
  // is restored (serve --segment-dir), so that clients keep its id: 1-64 of
  // [A-Za-z0-9._-], not taken.
  std::string id;
};

struct SegmentInfo {
  std::string id;          // "seg-<n>", unique for the engine's life
  std::string tenant;
  std::string cache_salt;
  int32_t tokens = 0;
  int32_t blocks = 0;      // full blocks pinned (when frozen)
  int64_t hits = 0;        // KV blocks later requests were served from it
  double created = 0;      // unix seconds
  double last_used = 0;    // unix seconds of its last hit (its creation before any)
  bool evicted = false;    // evicted above the watermark: no longer pinned
};

class ServingEngine {
 public:
  virtual ~ServingEngine() = default;

  // Queues a request. Errors (and the sink is never called):
  //   kInvalidArgument   empty prompt, bad sampling (logit_bias ids included),
  //                      token id outside the vocabulary (prompt, stop_token_ids)
  //   kOutOfRange        prompt longer than max_model_len - 1, or than the KV pool holds
  //   kResourceExhausted the waiting queue holds max_queue requests (HTTP 429)
  //   kUnavailable       draining or stopped (HTTP 503)
  // On success the sink receives events until one with finish != kNone.
  virtual Result<ServeId> submit(ServeRequest req, ServeSink sink) = 0;

  // Stops a request (client gone). Its sink gets a final kCancelled event
  // unless it already finished. Unknown ids are ignored.
  virtual void cancel(ServeId id) = 0;

  // Stops accepting (submit -> kUnavailable) and waits up to timeout_s for
  // queued and running requests to finish; the rest are cancelled. Returns
  // true when everything finished in time.
  virtual bool drain(double timeout_s) = 0;

  // Adapters at run time (vLLM's /v1/load_lora_adapter). load: kind "" =
  // from the file. Errors: kInvalidArgument (name taken, bad kind), kParse /
  // kIo / kUnsupported (bad adapter file: the message names it), kNotFound
  // (unload of an unknown name). Requests already running keep the adapter
  // they started with.
  virtual Status load_adapter(const std::string& name, const std::string& path, const std::string& kind) = 0;
  virtual Status unload_adapter(const std::string& name) = 0;
  // The base first, then adapters by name.
  virtual std::vector<ServedModel> models() const = 0;

  // Frozen segments. create_segment prefills spec.tokens as a request with
  // no generation (exact, kv_sharing none) and pins its full blocks; it
  // blocks until then. Errors: kInvalidArgument (empty, shorter than a
  // block, a token id outside the vocabulary, prefix caching off),
  // kOutOfRange (over max_model_len - 1 or the KV pool), kResourceExhausted
  // (queue full), kUnavailable (draining). Nothing stays pinned on an error.
  // delete_segment: kNotFound for an unknown id or another tenant's. Both
  // list and delete see only `tenant`'s segments. The base class serves none.
  virtual Result<SegmentInfo> create_segment(const SegmentSpec& spec) {
    (void)spec;
    return make_error(ErrorCode::kUnsupported, "this engine keeps no frozen segments");
  }
  virtual Status delete_segment(const std::string& id, const std::string& tenant) {
    (void)tenant;
    return make_error(ErrorCode::kNotFound, "no segment '", id, "'");
  }
  virtual std::vector<SegmentInfo> list_segments(const std::string& tenant) {
    (void)tenant;
    return {};
  }
  // Every frozen (not evicted) segment of every tenant, with its id and
  // tokens, in id order: what serve --segment-dir saves at shutdown. Empty
  // once the engine stopped.
  virtual std::vector<SegmentSpec> frozen_segment_specs() { return {}; }

  // Ends an agent session of `tenant` now: its blocks become ordinary cached
  // blocks. kNotFound for an unknown id or another tenant's.
  virtual Status end_session(const std::string& tenant, const std::string& id) {
    (void)tenant;
    return make_error(ErrorCode::kNotFound, "no session '", id, "'");
  }

  virtual ServingStats stats() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  virtual int32_t max_model_len() const = 0;
  virtual int32_t vocab_size() const = 0;
  // The model's layer count (0 from engines without a model: test fakes).
  virtual int32_t n_layers() const { return 0; }
};

Result<std::unique_ptr<ServingEngine>> create_serving_engine(const ServingOptions& opts);

const char* serve_finish_name(ServeFinish f);  // "stop", "length", "cancelled", "error", ""

}  // namespace agentkv
