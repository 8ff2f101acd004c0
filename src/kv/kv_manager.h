// The KV facade the scheduler talks to (vLLM v1's KVCacheManager): prefix
// lookups, slot allocation, registration of filled blocks and release, per
// request. The scheduler sees block ids only through block_table(), which it
// hands to the runner; matched prefixes travel as opaque KvBlocks.
//
// A request's life:
//   KvBlocks hit = kv.get_computed_blocks(prompt, keys);   // no pinning yet
//   kv.allocate_slots(id, prompt.size() - hit.n_tokens(), hit);  // pins hit, adds blocks
//   auto segs = kv.find_segments(prompt, hit.n_tokens(), keys, 2 * kv.block_size());
//   ... before copying a segment: kv.segment_hit_valid(seg), else recompute it
//   ... runner computes; after each step:
//   kv.commit_full_blocks(id, tokens_computed_so_far, keys);
//   kv.allocate_slots(id, 1);   // decode: room for one more token
//   kv.free(id);                // finished or preempted; blocks stay cached
//
// Frozen segments (frozen_segments.h): once a segment's tokens have been
// prefilled and committed from position 0, freeze_segment() pins its full
// blocks under an id until unfreeze_segment() or, above the watermark, an
// allocation evicts it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/frozen_segments.h"
#include "kv/segment_index.h"
#include "kv/segment_match.h"
#include "kv/session_table.h"
#include "util/status.h"

namespace agentkv {

using RequestId = uint64_t;

struct KvUsage {
  int32_t n_used = 0;    // held by some request
  int32_t n_cached = 0;  // unreferenced, findable, evictable
  int32_t n_free = 0;    // unreferenced, no content
  int32_t n_total = 0;
};

// A cached prefix found by get_computed_blocks. Opaque: hand it to
// allocate_slots of the same request before any other allocate_slots call
// (an allocation may evict what it names; a stale handle is rejected).
class KvBlocks {
 public:
  int32_t n_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t n_tokens() const { return n_blocks() * block_size_; }
  bool empty() const { return blocks_.empty(); }

 private:
  friend class KvManager;
  std::vector<BlockRef> blocks_;
  uint64_t last_hash_ = kRootHash;
  int32_t block_size_ = 0;
};

class KvManager {
 public:
  // n_blocks comes from the caller's memory budget. `hash` is a test seam
  // (inject collisions); production uses hash_block.
  KvManager(int32_t n_blocks, int32_t block_size, BlockHashFn hash = hash_block);
  KvManager(const KvManager&) = delete;
  KvManager& operator=(const KvManager&) = delete;

  int32_t block_size() const { return block_size_; }

  // Longest cached prefix of `tokens`, in full blocks, under `keys`. Never the
  // whole prompt: the last token is always left to compute so its logits
  // exist. Pins nothing and changes nothing.
  KvBlocks get_computed_blocks(std::span<const int32_t> tokens, const ExtraKeys& keys) const;
  // Same with keys per block (aLoRA: base lineage before the invocation
  // tokens, the adapter's after); block i uses keys[min(i, size-1)].
  KvBlocks get_computed_blocks_per_block(std::span<const int32_t> tokens,
                                         std::span<const ExtraKeys> keys) const;
  // The split the schemes use: blocks [0, n_first) under first_keys, the rest
  // under keys. Serialises each key set once, not once per block.
  KvBlocks get_computed_blocks_split(std::span<const int32_t> tokens, const ExtraKeys& first_keys, int32_t n_first,
                                     const ExtraKeys& keys) const;

  // Makes room for n_new_tokens more tokens of the request. The first call of
  // a request may adopt a cached prefix (`computed`): its blocks head the
  // table and its tokens count as held. kResourceExhausted (and no change)
  // when the pool cannot supply the blocks; the scheduler then preempts or
  // waits. kInvalidArgument for a stale or misplaced `computed`.
  Status allocate_slots(RequestId id, int32_t n_new_tokens, const KvBlocks& computed = {});

  // Registers the request's blocks that `tokens` (all tokens whose KV is
  // computed, prompt and generated) fills completely and that are not yet
  // registered, under `keys`. Call again with other keys to change lineage
  // from the next block on. A block whose content is already cached in
  // another block is not registered twice. Each block (or the block that
  // already held its content) from block `segment_from` on also enters the
  // segment index.
  void commit_full_blocks(RequestId id, std::span<const int32_t> tokens, const ExtraKeys& keys,
                          int32_t segment_from = 0);

  // Cached runs of `tokens` under `keys` at any token offset in
  // [from, tokens.size() - 1), from is where the exact prefix hit ends: see
  // segment_match.h. Exact blocks first; where none matched, blocks of the
  // same keys committed as approximate (ExtraKeys::approximate). Groups shorter than min_tokens are dropped. Pins
  // nothing and changes nothing.
  std::vector<SegmentHit> find_segments(std::span<const int32_t> tokens, int32_t from, const ExtraKeys& keys,
                                        int32_t min_tokens) const;
  // True while the hit's source block still holds the KV it named. Check
  // right before copying; nothing pins the source in between.
  bool segment_hit_valid(const SegmentHit& hit) const {
    return pool_.is_current(hit.src) && pool_.index().contains(hit.src.id);
  }
  // After copying a hit: its source counts as recently used (LRU), as a
  // prefix hit does, so segments in use are evicted last.
  void segment_hit_used(const SegmentHit& hit);
  const SegmentIndex& segments() const { return segments_; }
  // Whether a cached block owns segment hash `seg_hash` (its entry is current).
  bool segment_held(uint64_t seg_hash) const;

  // Blocks computed elsewhere (a remote tier), for the full blocks
  // [from, from + n) of `tokens` under the split keys (blocks before n_first
  // under first_keys, as get_computed_blocks_split): when the cached prefix
  // of `tokens` is exactly `from` blocks, takes up to n blocks, registers
  // them chained after it, and returns them, held, in order (fewer when the
  // pool runs short or a hash is taken). The caller writes their K/V and
  // then calls release_imported(); nothing else may touch the KV manager in
  // between. Empty when the cached prefix is not `from` blocks.
  std::vector<int32_t> import_blocks(std::span<const int32_t> tokens, const ExtraKeys& first_keys, int32_t n_first,
                                     const ExtraKeys& keys, int32_t from, int32_t n);
  // Blocks computed elsewhere that segment reuse may find at any offset
  // (the remote tier's segment refs), under `keys`: each item is one full
  // block, its prefix hash and parent hash where it was computed, and the
  // position of its first token there. Registers each in the prefix index
  // (chained to the previous item's block when that is its parent, to the
  // root for a first block, else as an orphan: kOrphanParent) and in the
  // segment index. Returns per item its block, held, or -1 where it was
  // not imported (already held here, the pool ran short, the hash is
  // taken). Then as import_blocks: write the K/V, release_imported().
  struct SegmentBlockImport {
    std::span<const int32_t> tokens;
    uint64_t hash = 0, parent_hash = kRootHash;
    int32_t pos = 0;
  };
  std::vector<int32_t> import_segment_blocks(const ExtraKeys& keys,
                                             std::span<const SegmentBlockImport> items);
  // The imported blocks become ordinary cached blocks (on the LRU).
  void release_imported(const std::vector<int32_t>& blocks) {
    std::vector<int32_t> held;
    for (int32_t b : blocks) {
      if (b >= 0) held.push_back(b);
    }
    pool_.release(held);
  }

  // Releases the request's blocks, tail first, so that under pressure a
  // sequence's tail is evicted before its (more shareable) head.
  void free(RequestId id);

  // The request's block ids in position order, for the runner. Empty for an
  // unknown request.
  const std::vector<int32_t>& block_table(RequestId id) const;
  // Tokens the request has slots for (adopted prefix + allocated).
  int32_t num_slots(RequestId id) const;
  bool has_request(RequestId id) const { return reqs_.count(id) != 0; }

  KvUsage usage() const;
  const BlockPool& pool() const { return pool_; }
  // The generation of the block holding KV slot `slot` (block * block_size
  // + offset): what a KV component's entry for the slot is checked against.
  uint32_t slot_generation(int64_t slot) const {
    return pool_.ref_of(static_cast<int32_t>(slot / block_size_)).generation;
  }
  // KV cache events (block_observer.h): every block registered in or removed
  // from the prefix index. Null: none.
  void set_block_observer(BlockObserver* o) { pool_.set_observer(o); }

  // Pins the cached full blocks of `tokens` (a sequence from position 0,
  // committed under `keys`) as frozen segment `id`, and makes them the
  // owners of their segment-index entries. Returns the blocks pinned.
  // kInvalidArgument: no full block, or the id is taken. kNotFound: some
  // full block is not cached (not computed, or evicted since). Nothing is
  // pinned on an error.
  Result<int32_t> freeze_segment(const std::string& id, std::span<const int32_t> tokens, const ExtraKeys& keys);
  // Deletes a segment (frozen or evicted). The KV of blocks nothing else
  // holds (no request, no other frozen segment) is forgotten: later prompts
  // recompute it. kNotFound for an unknown id.
  Status unfreeze_segment(const std::string& id);
  const FrozenSegments& frozen() const { return frozen_; }

  // Agent sessions (session_table.h): call before free(id) of a finished
  // request of session `key` (already scoped to its tenant) to protect the
  // blocks it wrote or read until `expires`.
  void keep_for_session(RequestId id, const std::string& key, double expires);
  SessionTable& sessions() { return sessions_; }
  const SessionTable& sessions() const { return sessions_; }
  // Allocations that would take used blocks (frozen ones included) above
  // this fraction of the pool evict frozen segments first, least hit first.
  void set_frozen_watermark(double fraction) { frozen_watermark_ = fraction; }
  double frozen_watermark() const { return frozen_watermark_; }

 private:
  struct Request {
    std::vector<int32_t> blocks;
    int32_t n_slots = 0;
    int32_t n_committed = 0;         // leading blocks registered (or found identical)
    BlockRef last_canonical;         // block that holds the last committed block's content
    std::vector<BlockRef> canonical; // per committed block: the block that holds its content
    uint64_t last_hash = kRootHash;  // its hash
    bool chain_broken = false;       // a collision stopped registration for good
  };

  // `whole`: every full block may match (freezing), not only those before
  // the last token.
  template <typename KeysAt>
  KvBlocks lookup(std::span<const int32_t> tokens, KeysAt keys_at, bool whole = false) const;
  // Evicts frozen segments while taking `extra` more blocks would put the
  // used ones above the watermark.
  void relieve_frozen_pressure(int64_t extra);
  // Gives the blocks of frozen segments back the segment-index entries
  // another block took (after an unfreeze made room). O(frozen tokens).
  void reindex_frozen();
  void index_frozen_block(const FrozenSegment& s, size_t i, bool only_if_free);
  // An index entry whose parent block was evicted or forgotten: unreachable.
  bool is_dead(const BlockKey& key) const;
  static const std::vector<int32_t> kEmpty;

  int32_t block_size_;
  BlockHashFn hash_;
  BlockPool pool_;
  SegmentIndex segments_;  // over the same blocks as pool_.index(); entries go when the blocks do
  std::unordered_map<RequestId, Request> reqs_;
  FrozenSegments frozen_;
  double frozen_watermark_ = 0.9;
  SessionTable sessions_{pool_};  // refers to pool_: KvManager is neither copied nor moved
};

}  // namespace agentkv
