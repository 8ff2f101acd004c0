// Per-request parameters of the KV-sharing schemes that have any (segment
// reuse: naive, epic, cacheblend, sparsex, relay; droidspeak). Unset fields take the server's defaults;
// a field on a scheme that does not use it is an error (docs/usage.md, "Segment reuse").
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace agentkv {

struct KvSharingParams {
  std::optional<double> ratio;                // cacheblend, sparsex: share of reused tokens recomputed, [0, 1]
  std::optional<int32_t> recompute_tokens;    // epic: first N tokens of each reused segment, >= 0
  std::optional<int32_t> check_layer;         // cacheblend: the layer that selects, >= 1
  std::optional<int32_t> boundary_layer;      // sparsex: dense below, selects at it (the paper's l*), >= 0
  std::optional<int32_t> overflow_blocks;     // sparsex: KV blocks added on each side of a run not reused, >= 0
  std::optional<int32_t> tail_tokens;         // sparsex: last reused tokens recomputed when the prompt ends in one, >= 0
  std::optional<int32_t> min_segment_tokens;  // every reuse scheme: shortest segment reused, >= 1
  // relay (RelayCaching, docs/scheme_algorithms.md §3): reused tokens recompute layers
  // [l_start, l_end) from their hidden-state snapshot, all of them up to
  // l_det, the selected ones above; l_start == l_end is direct reuse.
  std::optional<int32_t> l_start;
  std::optional<int32_t> l_det;
  std::optional<int32_t> l_end;
  std::optional<double> dev_threshold;        // relay: V deviation >= this x its mean selects, >= 0 (tau_dev)
  std::optional<double> influence_threshold;  // relay: influence >= this x its mean selects, >= 0 (tau_inf)
  std::optional<int32_t> suffix_tokens;       // relay: last reused tokens of each segment always selected, >= 0
  std::optional<int32_t>
      prefix_tokens;  // relay: first reused tokens of each segment recomputed in every layer (epic's), >= 0
  // droidspeak: the critical layers, whose K/V an agent recomputes for the
  // tokens another agent wrote (distinct, each in [0, n_layers)).
  std::optional<std::vector<int32_t>> critical_layers;

  bool empty() const;
  // This request's parameters, with each unset one taken from `defaults`.
  KvSharingParams with_defaults(const KvSharingParams& defaults) const;
};

// Every parameter by its API name (the "kv_sharing" object's keys, the
// bench specs' KEY=VALUE), in the order errors list them: exactly one of
// the three members is set.
struct KvSharingField {
  const char* name;
  std::optional<int32_t> KvSharingParams::*integer = nullptr;
  std::optional<double> KvSharingParams::*real = nullptr;
  std::optional<std::vector<int32_t>> KvSharingParams::*list = nullptr;  // a JSON array of integers; "a/b/c" in bench specs
};
inline constexpr KvSharingField kKvSharingFields[] = {
    {"ratio", nullptr, &KvSharingParams::ratio},
    {"recompute_tokens", &KvSharingParams::recompute_tokens},
    {"check_layer", &KvSharingParams::check_layer},
    {"boundary_layer", &KvSharingParams::boundary_layer},
    {"overflow_blocks", &KvSharingParams::overflow_blocks},
    {"tail_tokens", &KvSharingParams::tail_tokens},
    {"min_segment_tokens", &KvSharingParams::min_segment_tokens},
    {"l_start", &KvSharingParams::l_start},
    {"l_det", &KvSharingParams::l_det},
    {"l_end", &KvSharingParams::l_end},
    {"dev_threshold", nullptr, &KvSharingParams::dev_threshold},
    {"influence_threshold", nullptr, &KvSharingParams::influence_threshold},
    {"suffix_tokens", &KvSharingParams::suffix_tokens},
    {"prefix_tokens", &KvSharingParams::prefix_tokens},
    {"critical_layers", nullptr, nullptr, &KvSharingParams::critical_layers},
};

// Whether p sets field f.
inline bool kv_sharing_field_set(const KvSharingParams& p, const KvSharingField& f) {
  return f.integer ? (p.*f.integer).has_value() : f.real ? (p.*f.real).has_value() : (p.*f.list).has_value();
}

inline bool KvSharingParams::empty() const {
  for (const KvSharingField& f : kKvSharingFields) {
    if (kv_sharing_field_set(*this, f)) return false;
  }
  return true;
}

inline KvSharingParams KvSharingParams::with_defaults(const KvSharingParams& defaults) const {
  KvSharingParams p = *this;
  for (const KvSharingField& f : kKvSharingFields) {
    if (f.integer && !(p.*f.integer)) p.*f.integer = defaults.*f.integer;
    if (f.real && !(p.*f.real)) p.*f.real = defaults.*f.real;
    if (f.list && !(p.*f.list)) p.*f.list = defaults.*f.list;
  }
  return p;
}

}  // namespace agentkv
