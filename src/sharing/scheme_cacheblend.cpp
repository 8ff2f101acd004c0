// `cacheblend` (CacheBlend, docs/scheme_algorithms.md §4): every token runs layer 0 and the
// check layer (default 1) densely, writing fresh K/V. At the check layer the
// reused tokens are scored by the squared L2 distance between their fresh V
// and the V copied from the cache (CacheBlend's code; LMCache uses K), and
// the top `ratio` of them (default 0.15) stay; the others keep the cached
// K/V above the check layer. Tokens not reused always stay. Selection is
// once per prompt however the scheduler chunks it (whole_prompt_layer): the
// top ratio of all its reused tokens, as CacheBlend does.
// Exact limit: ratio 1.0 keeps every token in every layer, which is full
// prefill (bitwise, since the rows are those of a dense prefill).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "sharing/scheme_reuse_common.h"

namespace agentkv {

namespace {

class CacheblendPlanner final : public SeqPlanner {
 public:
  CacheblendPlanner(double ratio, int32_t check_layer)
      : SeqPlanner(true), ratio_(ratio), check_layer_(check_layer) {}

  void plan_chunk(const ReuseChunk& c, std::vector<ReuseRow>* rows, std::vector<ReuseHook>* hooks) override {
    int32_t n_reused = 0;
    for (int32_t i = 0; i < c.n; ++i) {
      if (!c.reused[i]) continue;
      rows->push_back(ReuseRow{c.begin + i, 0, -1});  // dense until the hook
      ++n_reused;
    }
    if (n_reused == 0 || check_layer_ >= c.n_layers || ratio_ >= 1.0) return;  // every row runs every layer
    // k as in CacheBlend: int(count * ratio).
    const int32_t k = static_cast<int32_t>(static_cast<double>(n_reused) * ratio_);
    std::vector<uint8_t> reused(c.reused.begin(), c.reused.end());
    const int32_t begin = c.begin;
    ReuseHook h;
    h.layer = check_layer_;
    h.fn = [reused = std::move(reused), begin, k](const ReuseHookView& v, std::span<uint8_t> keep) {
      std::vector<std::pair<double, size_t>> scored;  // (deviation, view row) of the reused rows
      for (size_t i = 0; i < v.pos.size(); ++i) {
        const int32_t at = v.pos[i] - begin;
        if (at < 0 || at >= static_cast<int32_t>(reused.size()) || !reused[at]) continue;
        double d = 0;
        for (int64_t j = 0; j < v.kv_dim; ++j) {
          const double e = double{v.v[i * v.kv_dim + j]} - double{v.cached_v[i * v.kv_dim + j]};
          d += e * e;
        }
        scored.emplace_back(d, i);
      }
      const size_t kk = std::min(scored.size(), static_cast<size_t>(std::max(k, 0)));
      // Largest deviation first; ties by position, so the choice is deterministic.
      std::partial_sort(scored.begin(), scored.begin() + kk, scored.end(),
                        [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
      for (size_t j = kk; j < scored.size(); ++j) keep[scored[j].second] = 0;
    };
    hooks->push_back(std::move(h));
  }

  // Its rows are dense through the check layer, where the hook decides.
  int32_t whole_prompt_layer(int32_t n_layers) const override {
    return check_layer_ < n_layers && ratio_ < 1.0 ? check_layer_ : -1;
  }

 private:
  double ratio_;
  int32_t check_layer_;
};

class SchemeCacheblend final : public ReuseScheme {
 public:
  const char* name() const override { return "cacheblend"; }
  Status check_params(const KvSharingParams& p) const override {
    return check_reuse_params(name(), {.ratio = true, .check_layer = true}, p);
  }
  std::unique_ptr<SeqPlanner> make_planner(const KvSharingParams& p) const override {
    return make_cacheblend_planner(p.ratio.value_or(kCacheblendDefaultRatio),
                                   p.check_layer.value_or(kCacheblendDefaultCheckLayer));
  }
};

}  // namespace

std::unique_ptr<SeqPlanner> make_cacheblend_planner(double ratio, int32_t check_layer) {
  return std::make_unique<CacheblendPlanner>(ratio, check_layer);
}

const SharingScheme* sharing_scheme_cacheblend_instance() {
  static const SchemeCacheblend s;
  return &s;
}

}  // namespace agentkv
