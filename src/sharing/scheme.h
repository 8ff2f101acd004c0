// The SharingScheme interface (docs/design.md §2–3): a scheme checks a request's
// parameters and admits it, returning the request's planner
// (sharing/planner.h), which answers every question the engine asks of it:
// which lineage its KV blocks get (so what it may share), which of its
// tokens run with the adapter's weights, which rows each chunk carries.
// Schemes know nothing of kernels, and of KV blocks only their size.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "adapter/adapter.h"
#include "agentkv/kv_sharing_params.h"
#include "kv/component_registry.h"
#include "sharing/planner.h"
#include "sharing/reuse_planners.h"
#include "util/status.h"

namespace agentkv {

// What a scheme decides a request's sharing from.
struct PlanContext {
  const Adapter* adapter = nullptr;       // nullptr: the base model
  std::span<const int32_t> prompt;
  const KvSharingParams* params = nullptr;  // checked, the server's defaults filled in
  int32_t shared_a_peers = 0;             // loaded adapters whose v_proj A is the adapter's
  // false: the request needs every prompt row computed (prompt logprobs),
  // so its planner reuses no segment.
  bool segment_reuse = true;
};

struct ServingOptions;  // agentkv/serving.h

// What a scheme sees at server start (SharingScheme::configure_server).
struct ServerSchemeContext {
  const ServingOptions* opts = nullptr;  // the server's options: the scheme's own profile and capture fields
  int32_t n_layers = 0;
  int32_t d_model = 0;
};

class SharingScheme {
 public:
  virtual ~SharingScheme() = default;
  virtual const char* name() const = 0;
  // adapter == nullptr is the base model. kInvalidArgument when the request
  // cannot run (an aLoRA prompt without its invocation sequence).
  virtual Result<SeqSharing> plan(const Adapter* adapter, std::span<const int32_t> prompt) const = 0;
  // The same with what the schemes that need more see (parameters, shared-A
  // groups); admit() calls this one.
  virtual Result<SeqSharing> plan_request(const PlanContext& c) const { return plan(c.adapter, c.prompt); }
  // Checks a request's scheme parameters: kInvalidArgument for a value out
  // of range or a parameter this scheme does not take. The exact schemes
  // take none.
  virtual Status check_params(const KvSharingParams& p) const;
  // The scheme whose parameters this one takes (a composition: its
  // segment-reuse part), for per-scheme defaults.
  virtual const SharingScheme* params_scheme() const { return this; }
  // Checks the parameters, defaults filled in, against the model: layer
  // indexes within its n_layers, the ones the scheme needs present.
  virtual Status check_model(const KvSharingParams& p, int32_t n_layers) const {
    (void)p;
    (void)n_layers;
    return Status::ok();
  }
  // Whether a request of this scheme, of a model of this kind (nullopt: the
  // base model), may hit KV blocks that another model wrote under `tag`:
  // "" for the base lineage (aLoRA before its invocation, an ICaRus
  // decoder), else a SeqSharing::shared_lineage tag ("full", ...). KV cache
  // events announce such blocks under each such model's name too.
  virtual bool reads_lineage(std::optional<AdapterKind> kind, std::string_view tag) const {
    (void)kind;
    (void)tag;
    return false;
  }
  // The request's planner with its per-request state (params checked): a
  // segment-reuse scheme's own; the exact schemes' plain SeqPlanner.
  // admit() sets its decision (plan_request) on it.
  virtual std::unique_ptr<SeqPlanner> make_planner(const KvSharingParams& p) const {
    (void)p;
    return std::make_unique<SeqPlanner>();
  }
  // Admits a request: its planner, holding plan_request's decision, with
  // segment reuse off where the context says so. After the parameter
  // checks, the engine's only per-request call. c.params must be set.
  Result<std::unique_ptr<SeqPlanner>> admit(const PlanContext& c) const;
  // At server start, once per scheme: fills the server's defaults of the
  // scheme's own parameters (from a profile of the served model the options
  // name), checks them against the model, and declares the KV components
  // its requests use, which count against the KV budget. kInvalidArgument
  // for a bad option or profile.
  virtual Status configure_server(const ServerSchemeContext& c, KvSharingParams* defaults,
                                  KvComponentRegistry* components) const {
    (void)c;
    (void)defaults;
    (void)components;
    return Status::ok();
  }
};

// The shared-K/V schemes (full, droidspeak, lragent-*): the base model and
// plain LoRA adapters read and write one shared lineage; aLoRA and ICaRus
// adapters keep their own rules.
inline bool shared_kv_reader(std::optional<AdapterKind> kind) { return !kind || *kind == AdapterKind::kLora; }

// Server-wide defaults of the segment-reuse parameters (docs/scheme_algorithms.md §4-6).
// Each is its scheme's cheapest setting within 5 accuracy points and a mean
// KL of 0.05 of full recomputation on `bench-fidelity --task retrieval`, 100
// paired prompts on SmolLM2-135M (scripts/bench_retrieval_defaults.sh;
// docs/benchmarks.md, "Segment-reuse defaults from a retrieval task the
// model solves"). The papers' defaults come from 7B-70B models.
inline constexpr double kCacheblendDefaultRatio = 0.15;  // LMCache's default; -1 point, KL 0.026
inline constexpr int32_t kCacheblendDefaultCheckLayer = 1;
// EPIC: LegoLink-16 lost 6 points (KL 0.033); 64 leading tokens lose 2 (KL 0.017).
inline constexpr int32_t kEpicDefaultRecomputeTokens = 64;
// SparseX: the paper gives l* as the first 15-20% of layers for small dense
// models (5 here) and the tail and overflow sizes, but no top-k budget.
// Without the dense layers (l* = 0) ratio 0.15 computes 45% of the K/V
// entries instead of 55% and loses 4 points (KL 0.026; l* = 5: 0 points, KL
// 0.019). At matched compute l* = 5 is the better front; l* = 0 is the
// cheaper setting that keeps to the bound.
inline constexpr int32_t kSparsexDefaultBoundaryLayer = 0;
inline constexpr double kSparsexDefaultRatio = 0.15;
inline constexpr int32_t kSparsexDefaultOverflowBlocks = 1;
inline constexpr int32_t kSparsexDefaultTailTokens = 64;
// min_segment_tokens defaults to two KV blocks (the engine knows the size).
// RelayCaching (§5.1, App. B.2): tau_dev, tau_inf and the suffix length.
// Its layers come from a profile of the model (agentkv profile-relay).
inline constexpr double kRelayDefaultDevThreshold = 1.5;
inline constexpr double kRelayDefaultInfluenceThreshold = 1.45;
inline constexpr int32_t kRelayDefaultSuffixTokens = 10;

// "none", "alora", "icarus", "naive", "epic", "cacheblend", "sparsex", "relay", "full",
// "droidspeak", "lragent-base", "lragent-baselr", and the compositions of an
// exact adapter scheme with a segment-reuse one ("alora+sparsex", in either
// order; the instance's name is the canonical exact+reuse order). Null for
// an unknown name or a pair that does not compose. Instances are static.
const SharingScheme* sharing_scheme_get(std::string_view name);
// The same, with an error that says what is wrong with the name: unknown,
// or which pair does not compose and why (kInvalidArgument).
Result<const SharingScheme*> sharing_scheme_find(std::string_view name);
// The single schemes' names, for help texts and errors (compositions are
// not listed one by one; sharing_scheme_list() says how to write them).
std::span<const char* const> sharing_scheme_names();
// Every composition's canonical name ("alora+naive", ...).
std::span<const char* const> sharing_composed_names();
// The single names as one "none, alora, ..." string, and the composition
// rule, for errors and help.
std::string sharing_scheme_list();

// The rules every scheme shares for the kinds it does not change: the
// adapter's own lineage on every block (never shared with another adapter),
// and the adapter's own semantics for its weights (aLoRA from its
// invocation, ICaRus encoder rows on base weights plus decoder rows).
Result<SeqSharing> sharing_plan_none(const Adapter* adapter, std::span<const int32_t> prompt);

// Start of the last occurrence of `needle` in `hay`, or -1.
int32_t find_last_occurrence(std::span<const int32_t> hay, std::span<const int32_t> needle);

}  // namespace agentkv
