// Segment reuse (DESIGN.md §2, SCHEMES.md §4-6): a request's prompt may
// contain runs of tokens whose K/V is already cached elsewhere, computed at
// other positions and behind another prefix. The engine finds them
// (SegmentIndex), copies their K/V into the request's blocks with K rotated
// to the new positions, and asks the request's ReusePlanner which tokens to
// recompute in which layers. The planner knows nothing of blocks or kernels:
// it sees positions, which of them were reused, and at its hook layers the
// fresh and cached K/V of the rows it kept running.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "agentkv/kv_sharing_params.h"
#include "util/status.h"

namespace agentkv {

// One scheduled chunk of a request's tokens, [begin, begin + n).
struct ReuseChunk {
  int32_t begin = 0;
  int32_t n = 0;
  int32_t n_layers = 0;
  int32_t n_prompt = 0;      // prompt tokens of the request (the chunk ends at or before)
  int32_t block_tokens = 0;  // tokens per KV block, for schemes that measure in blocks
  // Per position of the chunk: 1 when its K/V was copied from a cached
  // segment (the chunk's part of the request's reuse map).
  std::span<const uint8_t> reused;
  // Per position of the chunk: where its reused run starts (a position of
  // the request), or -1 for positions not reused.
  std::span<const int32_t> run_start;
  bool reused_after = false;  // the position right after the chunk is reused (a run goes on)
  // Captured state of the reused positions (KV components), for schemes
  // that resume rows from it: the layer whose entering hidden state is kept
  // (-1: none kept), per chunk position whether it is, and the position's
  // influence score (attention mass it received while it was generated; 0
  // where none was captured).
  int32_t hidden_layer = -1;
  std::span<const uint8_t> has_hidden;
  std::span<const float> influence;
};

// One row the planner wants: a token of the chunk active in [layer_begin,
// layer_end) (kAllLayers: to the last); it writes its K/V in those layers.
// layer_begin > 0 only at ReuseChunk::hidden_layer for a position with
// has_hidden: the row resumes from the snapshot.
struct ReuseRow {
  int32_t pos = 0;
  int32_t layer_begin = 0;
  int32_t layer_end = -1;
};

// What a planner's hook sees (the runner's HookView, by position).
struct ReuseHookView {
  std::span<const int32_t> pos;  // positions of the rows active at the layer, ascending
  const float* v = nullptr;      // fresh V [n, kv_dim]
  const float* cached_v = nullptr;
  const float* k = nullptr;      // fresh K after RoPE
  const float* cached_k = nullptr;
  int64_t kv_dim = 0;
  int64_t head_dim = 0;
  std::span<const float> colsum;  // when asked for
};

struct ReuseHook {
  int32_t layer = 0;
  std::vector<int32_t> colsum_pos;  // positions whose attention column sums the hook wants
  // Clears keep[i] for rows (view.pos[i]) that stop above this layer.
  std::function<void(const ReuseHookView& view, std::span<uint8_t> keep)> fn;
};

// Per-request state of a segment-reuse scheme, from admission to finish.
class ReusePlanner {
 public:
  virtual ~ReusePlanner() = default;
  // The reused positions of the chunk to recompute, with their layers, and
  // the hooks. Positions not reused always run every layer (the engine adds
  // them; hooks see them too); the last prompt position is never reused.
  virtual void plan_chunk(const ReuseChunk& chunk, std::vector<ReuseRow>* rows, std::vector<ReuseHook>* hooks) = 0;

  // A layer >= 0 asks for one selection over the whole prompt however the
  // scheduler chunks it. Every chunk but the prompt's last then runs each
  // of its positions densely up to that layer (K/V written in the layers
  // below it; layer 0 itself when the layer is 0), with no planner call; at
  // the last chunk the planner plans once, a ReuseChunk from the first such
  // chunk's begin to the prompt's end, and the earlier positions it plans
  // resume at the layer from their hidden state entering it. The cached
  // entries at the layer are still there for its hook (layer 0 aside).
  // The result is the one-chunk plan's, bit for bit. The contract: the
  // planner's rows run densely from layer 0 through at least this layer,
  // where its hook decides. -1: plan each chunk on its own.
  virtual int32_t whole_prompt_layer(int32_t n_layers) const {
    (void)n_layers;
    return -1;
  }
};

// The planners of the segment-reuse schemes; params are checked.
std::unique_ptr<ReusePlanner> make_naive_planner();
std::unique_ptr<ReusePlanner> make_epic_planner(int32_t recompute_tokens);
std::unique_ptr<ReusePlanner> make_cacheblend_planner(double ratio, int32_t check_layer);

// SparseX (SCHEMES.md §2): dense below boundary_layer, Sparse-Q selection at it.
struct SparsexConfig {
  int32_t boundary_layer = 0;
  double ratio = 0;
  int32_t overflow_blocks = 0;
  int32_t tail_tokens = 0;
};
std::unique_ptr<ReusePlanner> make_sparsex_planner(const SparsexConfig& c);

// RelayCaching (SCHEMES.md §3.3): reused tokens resume at l_start from their
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
std::unique_ptr<ReusePlanner> make_relay_planner(const RelayConfig& c);

}  // namespace agentkv
