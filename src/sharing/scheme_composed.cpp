// Composition (docs/design.md §3, "Schemes compose"): an exact adapter scheme and
// a segment-reuse scheme on one request. The exact scheme decides the
// weights, the lineage of each block and the decoder rows (so the team keeps
// its exact sharing of the prefix); the reuse scheme plans the reuse of
// documents cached anywhere in the prompt. The engine looks segments up under
// the lineage each position has: with alora, a position before the
// invocation finds segments the base lineage holds (the base model's, or
// another aLoRA adapter's before its invocation); with icarus, every position
// is the base encoder's, so the encoder's segments serve every decoder.
//
// What composes: alora or icarus with naive, epic, cacheblend, sparsex or
// relay. The shared-K/V schemes (full, droidspeak, lragent-*) already give
// every agent one lineage and recompute by their own rules, and two schemes
// of one kind have nothing to split between them.
#include <array>
#include <string>

#include "sharing/scheme.h"

namespace agentkv {

namespace {

class SchemeComposed final : public SharingScheme {
 public:
  SchemeComposed(const SharingScheme* exact, const SharingScheme* reuse)
      : exact_(exact), reuse_(reuse), name_(std::string(exact->name()) + "+" + reuse->name()) {}
  const char* name() const override { return name_.c_str(); }
  Result<SeqSharing> plan(const Adapter* adapter, std::span<const int32_t> prompt) const override {
    AKV_ASSIGN_OR_RETURN(SeqSharing s, exact_->plan(adapter, prompt));
    s.scheme = name();
    return s;
  }
  Result<SeqSharing> plan_request(const PlanContext& c) const override {
    AKV_ASSIGN_OR_RETURN(SeqSharing s, exact_->plan_request(c));
    s.scheme = name();
    return s;
  }
  // The parameters are the reuse scheme's: the exact schemes take none.
  Status check_params(const KvSharingParams& p) const override { return reuse_->check_params(p); }
  const SharingScheme* params_scheme() const override { return reuse_; }
  Status check_model(const KvSharingParams& p, int32_t n_layers) const override {
    return reuse_->check_model(p, n_layers);
  }
  bool reads_lineage(std::optional<AdapterKind> kind, std::string_view tag) const override {
    return exact_->reads_lineage(kind, tag);
  }
  std::unique_ptr<SeqPlanner> make_planner(const KvSharingParams& p) const override {
    return reuse_->make_planner(p);
  }

 private:
  const SharingScheme* exact_;
  const SharingScheme* reuse_;
  std::string name_;
};

constexpr std::array<const char*, 2> kExact = {"alora", "icarus"};
constexpr std::array<const char*, 5> kReuse = {"naive", "epic", "cacheblend", "sparsex", "relay"};
constexpr std::array<const char*, 10> kComposedNames = {
    "alora+naive",  "alora+epic",  "alora+cacheblend",  "alora+sparsex",  "alora+relay",
    "icarus+naive", "icarus+epic", "icarus+cacheblend", "icarus+sparsex", "icarus+relay"};

int index_of(std::span<const char* const> names, std::string_view n) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (n == names[i]) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

std::span<const char* const> sharing_composed_names() { return kComposedNames; }

Result<const SharingScheme*> sharing_composed_find(std::string_view a, std::string_view b) {
  const SharingScheme* sa = sharing_scheme_get(a);
  const SharingScheme* sb = sharing_scheme_get(b);
  const std::string pair = std::string(a) + "+" + std::string(b);
  if (sa == nullptr || sb == nullptr || a.find('+') != std::string_view::npos ||
      b.find('+') != std::string_view::npos) {
    return make_error(ErrorCode::kInvalidArgument, "unknown kv_sharing '", pair, "' (use ",
                      sharing_scheme_list(), ")");
  }
  int e = index_of(kExact, a), r = index_of(kReuse, b);
  if (e < 0 && r < 0) {  // the other order
    e = index_of(kExact, b);
    r = index_of(kReuse, a);
  }
  if (e >= 0 && r >= 0) {
    static const std::array<SchemeComposed, 10> composed = [] {
      auto at = [](size_t i) {
        return SchemeComposed(sharing_scheme_get(kExact[i / kReuse.size()]),
                              sharing_scheme_get(kReuse[i % kReuse.size()]));
      };
      return std::array<SchemeComposed, 10>{at(0), at(1), at(2), at(3), at(4),
                                            at(5), at(6), at(7), at(8), at(9)};
    }();
    return static_cast<const SharingScheme*>(&composed[static_cast<size_t>(e) * kReuse.size() + r]);
  }
  const bool ra = index_of(kReuse, a) >= 0, rb = index_of(kReuse, b) >= 0;
  if (ra && rb) {
    return make_error(
        ErrorCode::kInvalidArgument, "kv_sharing '", pair,
        "' names two segment-reuse schemes; a request takes one of naive, epic, cacheblend, sparsex, relay");
  }
  if (ra || rb) {
    return make_error(
        ErrorCode::kInvalidArgument, "kv_sharing '", pair, "': ", ra ? b : a,
        " does not compose with segment reuse; only alora and icarus do (a lone segment-reuse scheme "
        "already applies none's rules to adapters)");
  }
  return make_error(
      ErrorCode::kInvalidArgument, "kv_sharing '", pair,
      "' names two exact schemes; they decide the same thing (each block's lineage), so a request "
      "takes one, optionally with one segment-reuse scheme (alora+sparsex)");
}

}  // namespace agentkv
