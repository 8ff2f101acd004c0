// Segment reuse (docs/design.md §2, docs/scheme_algorithms.md §4-6): a request's prompt may
// contain runs of tokens whose K/V is already cached elsewhere, computed at
// other positions and behind another prefix. The engine finds them
// (SegmentIndex), copies their K/V into the request's blocks with K rotated
// to the new positions, and asks the request's planner (sharing/planner.h) which tokens to
// recompute in which layers. The planner knows nothing of blocks or kernels:
// it sees positions, which of them were reused, and at its hook layers the
// fresh and cached K/V of the rows it kept running.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

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

}  // namespace agentkv
