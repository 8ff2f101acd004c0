// `naive` (docs/scheme_algorithms.md §6, "ZERO"): every reused token keeps the K/V copied
// from its cached segment (K rotated to its new position); only the tokens
// not reused are computed, and they attend to everything. The cheapest and
// least faithful reuse: the reused K/V never sees its new prefix. Exact
// limit: none (it recomputes nothing it reused); it equals full prefill only
// when nothing is reused.
#include "sharing/scheme_reuse_common.h"

namespace agentkv {

namespace {

class NaivePlanner final : public SeqPlanner {
 public:
  NaivePlanner() : SeqPlanner(true) {}
  void plan_chunk(const ReuseChunk& c, std::vector<ReuseRow>* rows, std::vector<ReuseHook>* hooks) override {
    (void)c, (void)rows, (void)hooks;  // recompute no reused position
  }
};

class SchemeNaive final : public ReuseScheme {
 public:
  const char* name() const override { return "naive"; }
  Status check_params(const KvSharingParams& p) const override { return check_reuse_params(name(), {}, p); }
  std::unique_ptr<SeqPlanner> make_planner(const KvSharingParams& p) const override {
    (void)p;
    return make_naive_planner();
  }
};

}  // namespace

std::unique_ptr<SeqPlanner> make_naive_planner() { return std::make_unique<NaivePlanner>(); }

const SharingScheme* sharing_scheme_naive_instance() {
  static const SchemeNaive s;
  return &s;
}

}  // namespace agentkv
