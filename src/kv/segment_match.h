// Finds cached runs of tokens in a new prompt at token granularity, through
// the segment index (docs/scheme_algorithms.md §2.1 steps 1-2). SparseX pads each reused
// segment to a block boundary; we do not change the prompt: a hit is copied
// into the request's own blocks anyway (K rotated by the position delta), so
// it may start at any token offset.
//
// 1. Slide over the prompt: where the block-sized window tokens[o, o+bs)
//    equals an indexed block (tokens and extra-key bytes compared in full),
//    that is a hit at o and the search goes on at o + bs; otherwise at o + 1.
//    Right after a hit, the source block's successor in its own sequence is
//    tried first, so a run keeps one source and one position delta.
// 2. Extend each maximal run of block hits by single tokens: backwards into
//    the trailing tokens of the block before the run's first source block (its
//    prefix-index parent), forwards into the leading tokens of the block
//    after the last one (the successor the index recorded), while they are
//    still indexed, carry the same extra keys and match token by token. At
//    most one block each way: a whole matching block would have been a hit.
// 3. Drop groups of hits at contiguous prompt positions that cover fewer than
//    min_tokens tokens.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/segment_index.h"

namespace agentkv {

// n tokens at prompt positions [dst_pos, dst_pos + n) whose KV sits in block
// src at token offsets [src_offset, src_offset + n), computed at sequence
// positions [src_pos, src_pos + n): K must be rotated by dst_pos - src_pos.
// A hit never leaves its source block.
struct SegmentHit {
  int32_t dst_pos = 0;
  int32_t n = 0;
  BlockRef src;
  int32_t src_offset = 0;
  int32_t src_pos = 0;
  bool operator==(const SegmentHit&) const = default;
};

struct SegmentQuery {
  std::span<const int32_t> tokens;  // the whole prompt
  int32_t from = 0;                 // search [from, tokens.size() - 1): the exact prefix hit ends at from
  std::string_view extra;           // ExtraKeys::serialize() of the request
  int32_t min_tokens = 0;           // shorter contiguous groups are dropped
  // Every block used, extensions and successors included, must have a
  // segment-index entry of its own (approximate blocks: those holding
  // copied K/V are committed without one and must not serve).
  bool indexed_only = false;
};

// Hits sorted by dst_pos, non-overlapping, inside [from, tokens.size() - 1):
// the last prompt token is never covered (its logits must be computed).
std::vector<SegmentHit> match_segments(const SegmentIndex& index, const BlockPool& pool, BlockHashFn hash,
                                       int32_t block_size, const SegmentQuery& query);

}  // namespace agentkv
