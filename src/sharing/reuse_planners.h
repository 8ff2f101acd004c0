// The planners of the segment-reuse schemes (docs/scheme_algorithms.md §2-6), made
// directly: the schemes' make_planner() and the planner unit tests use these.
#pragma once

#include <cstdint>
#include <memory>

#include "sharing/planner.h"

namespace agentkv {

// The planners of the segment-reuse schemes; params are checked.
std::unique_ptr<SeqPlanner> make_naive_planner();
std::unique_ptr<SeqPlanner> make_epic_planner(int32_t recompute_tokens);
std::unique_ptr<SeqPlanner> make_cacheblend_planner(double ratio, int32_t check_layer);

// SparseX (docs/scheme_algorithms.md §2): dense below boundary_layer, Sparse-Q selection at it.
struct SparsexConfig {
  int32_t boundary_layer = 0;
  double ratio = 0;
  int32_t overflow_blocks = 0;
  int32_t tail_tokens = 0;
};
std::unique_ptr<SeqPlanner> make_sparsex_planner(const SparsexConfig& c);

// RelayCaching (docs/scheme_algorithms.md §3.3): reused tokens resume at l_start from their
// hidden-state snapshot, all recompute through l_det, the selected ones
// (deviation, influence, suffix) up to l_end; the first prefix_tokens of each
// reused run recompute every layer, as epic's do (an ablation, 0 by default).
struct RelayConfig {
  int32_t l_start = 0;
  int32_t l_det = 0;
  int32_t l_end = 0;
  double dev_threshold = 0;
  double influence_threshold = 0;
  int32_t suffix_tokens = 0;
  int32_t prefix_tokens = 0;
};
std::unique_ptr<SeqPlanner> make_relay_planner(const RelayConfig& c);

}  // namespace agentkv
