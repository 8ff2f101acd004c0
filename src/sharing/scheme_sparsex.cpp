// `sparsex` (SparseX, docs/scheme_algorithms.md §2; paper §3, App. A Alg. 1):
//   - layers [0, l*) run densely for every prompt position, writing fresh K/V
//     (the "hybrid" boundary; l* = 0 is the paper's variant without it);
//   - at layer l* every position writes fresh K/V, and the positions not
//     reused (Sparse-Q) score every key by the attention mass it receives,
//     summed over those queries and all query heads;
//   - the recompute set R is: the positions not reused, the top-k reused
//     positions by that score, `overflow_blocks` KV blocks of reused
//     positions on each side of every run not reused, and, when the prompt
//     ends in reused text, its last `tail_tokens` reused positions;
//   - above l* only R runs; the others keep the K/V copied from the cache.
// Choices of ours, where the paper is silent:
//   - k = floor(ratio x the chunk's reused positions), picked among the reused
//     positions that overflow and tail did not already put in R, so the
//     ratio is what the score adds;
//   - the engine never reuses the last prompt position, so "the prompt ends
//     in reused text" means the position before it is reused;
//   - selection is once per prompt, as in the paper, however the scheduler
//     chunks it (whole_prompt_layer): earlier chunks run up to l*, and the
//     prompt's last chunk plans every position from there. A prompt with no
//     Sparse-Q row (reused text from end to end) scores with all its rows
//     as queries. Where selection is per chunk after all (a request whose
//     relay captures take the rows' one capture), overflow reaches across a
//     chunk boundary forward (the planner remembers the last position not
//     reused), not backward (the earlier chunk has run).
// Exact limit: l* >= the layer count, or ratio 1.0, runs every position in
// every layer, which is full prefill (bitwise: the rows are a dense prefill's).
#include <algorithm>
#include <numeric>

#include "sharing/scheme_reuse_common.h"

namespace agentkv {

namespace {

class SparsexPlanner final : public SeqPlanner {
 public:
  explicit SparsexPlanner(const SparsexConfig& c) : SeqPlanner(true), c_(c) {}

  void plan_chunk(const ReuseChunk& c, std::vector<ReuseRow>* rows, std::vector<ReuseHook>* hooks) override {
    const int32_t ov = c_.overflow_blocks * c.block_tokens;
    std::vector<uint8_t> forced(c.n, 0);  // reused positions that R holds whatever the score
    std::vector<int32_t> sparse_q;        // positions not reused
    int32_t n_reused = 0;
    int32_t last_nr = last_not_reused_;
    for (int32_t i = 0; i < c.n; ++i) {
      const int32_t pos = c.begin + i;
      if (!c.reused[i]) {
        sparse_q.push_back(pos);
        last_nr = pos;
        // Overflow before this run: the reused positions just ahead of it.
        for (int32_t j = i - 1; j >= 0 && c.reused[j] && pos - (c.begin + j) <= ov; --j) forced[j] = 1;
        continue;
      }
      ++n_reused;
      rows->push_back(ReuseRow{pos, 0, -1});  // dense until the boundary
      // Overflow after a run: the reused positions just behind it.
      if (last_nr >= 0 && pos - last_nr <= ov) forced[i] = 1;
    }
    if (c.n > 0) last_not_reused_ = last_nr;
    // Tail: the prompt ends in reused text (the last position is never
    // reused; the one before it is).
    const int32_t last = c.n_prompt - 1;
    if (last - 1 >= c.begin && last < c.begin + c.n && c.reused[last - 1 - c.begin]) {
      for (int32_t pos = std::max(c.begin, last - c_.tail_tokens); pos < last; ++pos) {
        if (c.reused[pos - c.begin]) forced[pos - c.begin] = 1;
      }
    }
    if (n_reused == 0 || c_.boundary_layer >= c.n_layers || c_.ratio >= 1.0) return;  // every row, every layer

    const int32_t k = static_cast<int32_t>(static_cast<double>(n_reused) * c_.ratio);
    ReuseHook h;
    h.layer = c_.boundary_layer;
    if (sparse_q.empty()) {
      h.colsum_pos.resize(c.n);
      std::iota(h.colsum_pos.begin(), h.colsum_pos.end(), c.begin);
    } else {
      h.colsum_pos = std::move(sparse_q);
    }
    std::vector<uint8_t> reused(c.reused.begin(), c.reused.end());
    const int32_t begin = c.begin;
    h.fn = [reused = std::move(reused), forced = std::move(forced), begin, k](const ReuseHookView& v,
                                                                               std::span<uint8_t> keep) {
      std::vector<std::pair<float, size_t>> scored;  // (score, view row) of reused rows R does not hold yet
      for (size_t i = 0; i < v.pos.size(); ++i) {
        const int32_t at = v.pos[i] - begin;
        if (at < 0 || at >= static_cast<int32_t>(reused.size()) || !reused[at] || forced[at]) continue;
        const size_t p = static_cast<size_t>(v.pos[i]);
        scored.emplace_back(p < v.colsum.size() ? v.colsum[p] : 0.0f, i);
      }
      const size_t kk = std::min(scored.size(), static_cast<size_t>(std::max(k, 0)));
      // Largest score first; ties by position, so the choice is deterministic.
      std::partial_sort(scored.begin(), scored.begin() + kk, scored.end(), [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
      });
      for (size_t j = kk; j < scored.size(); ++j) keep[scored[j].second] = 0;
    };
    hooks->push_back(std::move(h));
  }

  // The hook reads column sums only, and its rows are dense through l*.
  int32_t whole_prompt_layer(int32_t n_layers) const override {
    return c_.boundary_layer < n_layers && c_.ratio < 1.0 ? c_.boundary_layer : -1;
  }

 private:
  SparsexConfig c_;
  int32_t last_not_reused_ = -1;  // across chunks, for overflow
};

class SchemeSparsex final : public ReuseScheme {
 public:
  const char* name() const override { return "sparsex"; }
  Status check_params(const KvSharingParams& p) const override {
    return check_reuse_params(name(),
                              {.ratio = true, .boundary_layer = true, .overflow_blocks = true, .tail_tokens = true}, p);
  }
  std::unique_ptr<SeqPlanner> make_planner(const KvSharingParams& p) const override {
    SparsexConfig c;
    c.boundary_layer = p.boundary_layer.value_or(kSparsexDefaultBoundaryLayer);
    c.ratio = p.ratio.value_or(kSparsexDefaultRatio);
    c.overflow_blocks = p.overflow_blocks.value_or(kSparsexDefaultOverflowBlocks);
    c.tail_tokens = p.tail_tokens.value_or(kSparsexDefaultTailTokens);
    return make_sparsex_planner(c);
  }
};

}  // namespace

std::unique_ptr<SeqPlanner> make_sparsex_planner(const SparsexConfig& c) {
  return std::make_unique<SparsexPlanner>(c);
}

const SharingScheme* sharing_scheme_sparsex_instance() {
  static const SchemeSparsex s;
  return &s;
}

}  // namespace agentkv
