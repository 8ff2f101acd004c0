// `epic` (EPIC's LegoLink, docs/scheme_algorithms.md §5): the first N tokens of every reused
// segment are recomputed in every layer, with all tokens not reused; the
// rest of each segment keeps its copied K/V. The selection is static: it
// does not look at the forward pass. Default N = 16 (LegoLink-16).
// Exact limit: N >= the longest segment recomputes every token, which is
// full prefill.
#include "sharing/scheme_reuse_common.h"

namespace agentkv {

namespace {

class EpicPlanner final : public SeqPlanner {
 public:
  explicit EpicPlanner(int32_t n) : SeqPlanner(true), n_(n) {}
  void plan_chunk(const ReuseChunk& c, std::vector<ReuseRow>* rows, std::vector<ReuseHook>* hooks) override {
    (void)hooks;
    for (int32_t i = 0; i < c.n; ++i) {
      const int32_t pos = c.begin + i;
      // A segment split across chunks keeps counting from its own start.
      if (c.reused[i] && pos - c.run_start[i] < n_) rows->push_back(ReuseRow{pos, 0, -1});
    }
  }

 private:
  int32_t n_;
};

class SchemeEpic final : public ReuseScheme {
 public:
  const char* name() const override { return "epic"; }
  Status check_params(const KvSharingParams& p) const override {
    return check_reuse_params(name(), {.recompute_tokens = true}, p);
  }
  std::unique_ptr<SeqPlanner> make_planner(const KvSharingParams& p) const override {
    return make_epic_planner(p.recompute_tokens.value_or(kEpicDefaultRecomputeTokens));
  }
};

}  // namespace

std::unique_ptr<SeqPlanner> make_epic_planner(int32_t recompute_tokens) {
  return std::make_unique<EpicPlanner>(recompute_tokens);
}

const SharingScheme* sharing_scheme_epic_instance() {
  static const SchemeEpic s;
  return &s;
}

}  // namespace agentkv
