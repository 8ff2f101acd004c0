#include "kv/kv_manager.h"

#include <algorithm>
#include <chrono>

namespace agentkv {

namespace {

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

const std::vector<int32_t> KvManager::kEmpty;

KvManager::KvManager(int32_t n_blocks, int32_t block_size, BlockHashFn hash)
    : block_size_(block_size), hash_(hash), pool_(n_blocks), segments_(n_blocks) {}

template <typename KeysAt>
KvBlocks KvManager::lookup(std::span<const int32_t> tokens, KeysAt keys_at, bool whole) const {
  KvBlocks out;
  out.block_size_ = block_size_;
  if (tokens.empty()) return out;
  // Full blocks only, and never the last token: its logits must be computed.
  const size_t n_max = whole ? tokens.size() / block_size_ : (tokens.size() - 1) / block_size_;
  BlockKey key;
  for (size_t i = 0; i < n_max; ++i) {
    key.tokens.assign(tokens.begin() + i * block_size_, tokens.begin() + (i + 1) * block_size_);
    key.extra = keys_at(i);
    key.hash = hash_(out.last_hash_, key.tokens, key.extra);
    key.parent = out.blocks_.empty() ? BlockRef{} : out.blocks_.back();
    const int32_t b = pool_.find_cached(key);
    if (b < 0) break;
    out.blocks_.push_back(pool_.ref_of(b));
    out.last_hash_ = key.hash;
  }
  return out;
}

KvBlocks KvManager::get_computed_blocks(std::span<const int32_t> tokens, const ExtraKeys& keys) const {
  const std::string extra = keys.serialize();
  return lookup(tokens, [&](size_t) -> const std::string& { return extra; });
}

KvBlocks KvManager::get_computed_blocks_per_block(std::span<const int32_t> tokens,
                                                  std::span<const ExtraKeys> keys) const {
  if (keys.empty()) return get_computed_blocks(tokens, ExtraKeys{});
  return lookup(tokens, [&](size_t i) { return keys[std::min(i, keys.size() - 1)].serialize(); });
}

KvBlocks KvManager::get_computed_blocks_split(std::span<const int32_t> tokens, const ExtraKeys& first_keys,
                                              int32_t n_first, const ExtraKeys& keys) const {
  const std::string first = first_keys.serialize();
  const std::string rest = keys.serialize();
  const size_t n = static_cast<size_t>(std::max(n_first, 0));
  return lookup(tokens, [&](size_t i) -> const std::string& { return i < n ? first : rest; });
}

Status KvManager::allocate_slots(RequestId id, int32_t n_new_tokens, const KvBlocks& computed) {
  if (n_new_tokens < 0) return make_error(ErrorCode::kInvalidArgument, "negative token count ", n_new_tokens);
  auto it = reqs_.find(id);
  const bool is_new = it == reqs_.end();
  if (!computed.empty()) {
    if (!is_new) {
      return make_error(ErrorCode::kInvalidArgument, "request ", id,
                        " already holds blocks; a cached prefix is adopted only by its first allocate_slots");
    }
    if (computed.block_size_ != block_size_) {
      return make_error(ErrorCode::kInvalidArgument, "KvBlocks from a manager with another block size");
    }
    for (const BlockRef& r : computed.blocks_) {
      if (!pool_.is_current(r) || !pool_.index().contains(r.id)) {
        return make_error(ErrorCode::kInvalidArgument, "stale KvBlocks handle for request ", id, ": block ",
                          r.id, " was evicted since the lookup");
      }
    }
  }
  const int64_t held_tokens = is_new ? int64_t{computed.n_tokens()} : int64_t{it->second.n_slots};
  const int64_t held_blocks = is_new ? computed.n_blocks() : static_cast<int64_t>(it->second.blocks.size());
  const int64_t end = held_tokens + n_new_tokens;
  const int64_t need = std::max<int64_t>(0, (end + block_size_ - 1) / block_size_ - held_blocks);
  // Adopted blocks that sit on the LRU stop being available once pinned.
  int64_t pinned_from_lru = 0;
  for (const BlockRef& r : computed.blocks_) pinned_from_lru += pool_.meta(r.id).ref == 0;
  relieve_frozen_pressure(need + pinned_from_lru);
  if (need + pinned_from_lru > pool_.n_available()) {
    return make_error(ErrorCode::kResourceExhausted, "KV cache exhausted: need ", need + pinned_from_lru,
                      " blocks, ", pool_.n_available(), " free of ", pool_.n_blocks());
  }
  // Pin the hits first so the allocation below cannot evict them.
  Request* req;
  if (is_new) {
    req = &reqs_[id];
    const int64_t now = frozen_.n_frozen() > 0 ? unix_ms() : 0;
    for (const BlockRef& r : computed.blocks_) {
      pool_.touch(r.id);
      req->blocks.push_back(r.id);
      req->canonical.push_back(r);
      frozen_.record_hit(r.id, now);
    }
    req->n_committed = computed.n_blocks();
    req->n_slots = computed.n_tokens();
    if (!computed.empty()) req->last_canonical = computed.blocks_.back();
    req->last_hash = computed.last_hash_;
  } else {
    req = &it->second;
  }
  auto fresh = pool_.allocate(static_cast<int32_t>(need));
  if (!fresh.is_ok()) return fresh.status();  // unreachable: checked above
  // Evicted or never used: whatever segment entry the block had is stale now.
  for (int32_t b : *fresh) segments_.erase(b);
  req->blocks.insert(req->blocks.end(), fresh->begin(), fresh->end());
  req->n_slots = static_cast<int32_t>(end);
  return Status::ok();
}

void KvManager::commit_full_blocks(RequestId id, std::span<const int32_t> tokens, const ExtraKeys& keys,
                                   int32_t segment_from) {
  auto it = reqs_.find(id);
  if (it == reqs_.end()) return;
  Request& req = it->second;
  const int32_t n_full = static_cast<int32_t>(std::min<size_t>(
      {tokens.size() / block_size_, req.blocks.size(), static_cast<size_t>(req.n_slots) / block_size_}));
  if (req.chain_broken || req.n_committed >= n_full) return;
  BlockKey key;
  key.extra = keys.serialize();
  for (int32_t i = req.n_committed; i < n_full; ++i) {
    key.tokens.assign(tokens.begin() + static_cast<size_t>(i) * block_size_,
                      tokens.begin() + static_cast<size_t>(i + 1) * block_size_);
    key.hash = hash_(req.last_hash, key.tokens, key.extra);
    key.parent = req.last_canonical;
    const int32_t mine = req.blocks[i];
    BlockRef canonical;
    const int32_t existing = pool_.find_cached(key);
    if (existing == mine || (existing >= 0 && pool_.meta(existing).ref > 0)) {
      canonical = pool_.ref_of(existing);  // the same content, held: share its identity
    } else {
      // An unreferenced duplicate gives way to our held block; so does an
      // entry whose parent is gone (no lookup can reach it any more).
      const int32_t holder = existing >= 0 ? existing : pool_.index().holder(key.hash);
      if (holder >= 0 && (holder == existing || is_dead(*pool_.index().key_of(holder)))) {
        pool_.uncache(holder);
        segments_.erase(holder);
      }
      if (!pool_.cache(mine, key, req.last_hash)) {
        // A true collision: this content cannot be indexed, nor can anything
        // after it (a child is found only through an indexed parent).
        req.chain_broken = true;
        return;
      }
      canonical = pool_.ref_of(mine);
    }
    // The segment key leaves out the parent: the block is found at any offset.
    // Its parent (the block before it) stays reachable through the prefix key.
    // A frozen block keeps its entry: the same tokens elsewhere do not take it.
    const uint64_t seg_hash = hash_(kRootHash, key.tokens, key.extra);
    const SegmentEntry* owner = segments_.find(seg_hash);
    if (i >= segment_from && (owner == nullptr || owner->block.id == canonical.id || !frozen_.pins(owner->block.id))) {
      segments_.add(canonical, seg_hash, i * block_size_, pool_.is_current(key.parent) ? key.parent : BlockRef{});
    }
    req.last_canonical = canonical;
    req.canonical.push_back(canonical);
    req.last_hash = key.hash;
    req.n_committed = i + 1;
  }
}

std::vector<int32_t> KvManager::import_blocks(std::span<const int32_t> tokens, const ExtraKeys& first_keys,
                                             int32_t n_first, const ExtraKeys& keys, int32_t from, int32_t n) {
  // As lookups: never the block holding the last token (its logits must be computed).
  const int32_t n_full = tokens.empty() ? 0 : static_cast<int32_t>((tokens.size() - 1) / block_size_);
  n = std::min(n, n_full - from);
  if (from < 0 || n <= 0) return {};
  const KvBlocks hit = get_computed_blocks_split(tokens, first_keys, n_first, keys);
  if (hit.n_blocks() != from) return {};
  // Pin the prefix: the allocation below must not evict the parent we chain to.
  std::vector<int32_t> pinned;
  for (const BlockRef& r : hit.blocks_) {
    pool_.touch(r.id);
    pinned.push_back(r.id);
  }
  auto got = pool_.allocate(std::min(n, pool_.n_available()));
  pool_.release(pinned);
  if (!got.is_ok()) return {};
  std::vector<int32_t> blocks = std::move(got).value();
  const std::string first_extra = first_keys.serialize(), extra = keys.serialize();
  uint64_t last_hash = hit.last_hash_;
  BlockRef parent = hit.blocks_.empty() ? BlockRef{} : hit.blocks_.back();
  size_t done = 0;
  for (; done < blocks.size(); ++done) {
    const int32_t i = from + static_cast<int32_t>(done);
    BlockKey key;
    key.extra = i < n_first ? first_extra : extra;
    key.tokens.assign(tokens.begin() + static_cast<size_t>(i) * block_size_,
                      tokens.begin() + static_cast<size_t>(i + 1) * block_size_);
    key.hash = hash_(last_hash, key.tokens, key.extra);
    key.parent = parent;
    if (pool_.find_cached(key) >= 0 || pool_.index().holder(key.hash) >= 0) break;
    const uint64_t seg_hash = hash_(kRootHash, key.tokens, key.extra);
    const uint64_t h = key.hash;
    if (!pool_.cache(blocks[done], std::move(key), last_hash)) break;
    const BlockRef prev = pool_.is_current(parent) ? parent : BlockRef{};
    parent = pool_.ref_of(blocks[done]);
    if (segments_.find(seg_hash) == nullptr) segments_.add(parent, seg_hash, i * block_size_, prev);
    last_hash = h;
  }
  if (done < blocks.size()) {
    pool_.release(std::vector<int32_t>(blocks.begin() + static_cast<ptrdiff_t>(done), blocks.end()));
    blocks.resize(done);
  }
  return blocks;
}

bool KvManager::segment_held(uint64_t seg_hash) const {
  const SegmentEntry* e = segments_.find(seg_hash);
  return e != nullptr && pool_.is_current(e->block) && pool_.index().contains(e->block.id);
}

std::vector<int32_t> KvManager::import_segment_blocks(const ExtraKeys& keys,
                                                      std::span<const SegmentBlockImport> items) {
  std::vector<int32_t> out(items.size(), -1);
  const int32_t want = std::min(static_cast<int32_t>(items.size()), pool_.n_available());
  if (want <= 0) return out;
  auto got = pool_.allocate(want);
  if (!got.is_ok()) return out;
  std::vector<int32_t> blocks = std::move(got).value();
  for (int32_t b : blocks) segments_.erase(b);  // evicted: its entry is stale
  const std::string extra = keys.serialize();
  size_t used = 0;
  BlockRef prev;  // the block imported for the previous item, while items chain
  uint64_t prev_hash = 0;
  for (size_t i = 0; i < items.size() && used < blocks.size(); ++i) {
    const SegmentBlockImport& it = items[i];
    const uint64_t seg_hash = hash_(kRootHash, it.tokens, extra);
    if (static_cast<int32_t>(it.tokens.size()) != block_size_ || pool_.index().holder(it.hash) >= 0 ||
        segment_held(seg_hash)) {
      prev = {};
      continue;  // held here already (as a prefix block or under its segment key)
    }
    BlockKey key;
    key.hash = it.hash;
    key.tokens.assign(it.tokens.begin(), it.tokens.end());
    key.extra = extra;
    if (it.parent_hash == kRootHash) {
      key.parent = {};
    } else if (prev.id >= 0 && prev_hash == it.parent_hash && pool_.is_current(prev)) {
      key.parent = prev;
    } else {
      key.parent = kOrphanParent;
    }
    const BlockRef parent = key.parent;
    if (!pool_.cache(blocks[used], std::move(key), it.parent_hash)) {
      prev = {};
      continue;
    }
    const BlockRef ref = pool_.ref_of(blocks[used]);
    segments_.add(ref, seg_hash, it.pos, parent.id >= 0 ? parent : BlockRef{});
    out[i] = blocks[used++];
    prev = ref;
    prev_hash = it.hash;
  }
  if (used < blocks.size())
    pool_.release(std::vector<int32_t>(blocks.begin() + static_cast<ptrdiff_t>(used), blocks.end()));
  return out;
}

std::vector<SegmentHit> KvManager::find_segments(std::span<const int32_t> tokens, int32_t from,
                                                 const ExtraKeys& keys, int32_t min_tokens) const {
  const std::string extra = keys.serialize();
  std::vector<SegmentHit> hits = match_segments(segments_, pool_, hash_, block_size_, {tokens, from, extra, min_tokens});
  if (keys.approximate) return hits;
  // Then K/V that segment reuse computed over approximate context (a
  // previous agent's output in a chain), where no exact block matched.
  ExtraKeys approx = keys;
  approx.approximate = true;
  const std::string approx_extra = approx.serialize();
  const std::vector<SegmentHit> more =
      match_segments(segments_, pool_, hash_, block_size_, {tokens, from, approx_extra, min_tokens, true});
  if (more.empty()) return hits;
  std::vector<SegmentHit> out;
  out.reserve(hits.size() + more.size());
  size_t i = 0;
  for (const SegmentHit& m : more) {
    while (i < hits.size() && hits[i].dst_pos + hits[i].n <= m.dst_pos) out.push_back(hits[i++]);
    const bool overlaps = i < hits.size() && hits[i].dst_pos < m.dst_pos + m.n;
    if (!overlaps) out.push_back(m);
  }
  while (i < hits.size()) out.push_back(hits[i++]);
  return out;
}

void KvManager::segment_hit_used(const SegmentHit& hit) {
  pool_.refresh(hit.src.id);
  if (frozen_.n_frozen() > 0) frozen_.record_hit(hit.src.id, unix_ms());
}

Result<int32_t> KvManager::freeze_segment(const std::string& id, std::span<const int32_t> tokens,
                                          const ExtraKeys& keys) {
  const int32_t n_full = static_cast<int32_t>(tokens.size() / block_size_);
  if (n_full == 0) {
    return make_error(ErrorCode::kInvalidArgument, "a frozen segment needs at least one full block (", block_size_,
                      " tokens); it has ", tokens.size());
  }
  if (frozen_.find(id) != nullptr) return make_error(ErrorCode::kInvalidArgument, "segment id '", id, "' is taken");
  const std::string extra = keys.serialize();
  const KvBlocks found = lookup(tokens, [&](size_t) -> const std::string& { return extra; }, /*whole=*/true);
  if (found.n_blocks() < n_full) {
    return make_error(ErrorCode::kNotFound, "segment '", id, "': block ", found.n_blocks(), " of ", n_full,
                      " is not cached (not computed, or evicted since)");
  }
  FrozenSegment seg;
  seg.id = id;
  seg.tokens.assign(tokens.begin(), tokens.end());
  seg.keys = keys;
  seg.blocks = found.blocks_;
  seg.created_ms = seg.last_used_ms = unix_ms();
  for (const BlockRef& r : seg.blocks) pool_.touch(r.id);
  frozen_.add(std::move(seg));
  const FrozenSegment& s = *frozen_.find(id);
  for (size_t i = 0; i < s.blocks.size(); ++i) index_frozen_block(s, i, /*only_if_free=*/false);
  return n_full;
}

void KvManager::index_frozen_block(const FrozenSegment& s, size_t i, bool only_if_free) {
  const std::span<const int32_t> toks(s.tokens.data() + i * block_size_, static_cast<size_t>(block_size_));
  const uint64_t h = hash_(kRootHash, toks, s.keys.serialize());
  const SegmentEntry* owner = segments_.find(h);
  if (owner != nullptr && owner->block.id == s.blocks[i].id) return;
  if (only_if_free && owner != nullptr && pool_.is_current(owner->block) && frozen_.pins(owner->block.id)) return;
  segments_.add(s.blocks[i], h, static_cast<int32_t>(i) * block_size_, i > 0 ? s.blocks[i - 1] : BlockRef{});
}

Status KvManager::unfreeze_segment(const std::string& id) {
  std::optional<std::vector<BlockRef>> blocks = frozen_.remove(id);
  if (!blocks) return make_error(ErrorCode::kNotFound, "no segment '", id, "'");
  if (blocks->empty()) return Status::ok();  // evicted before: nothing pinned
  std::vector<int32_t> ids;
  for (const BlockRef& r : *blocks) ids.push_back(r.id);
  pool_.release(ids);
  // Deleted, its KV is forgotten where nothing else holds it: later prompts
  // recompute it (an evicted segment only goes back to the LRU instead).
  for (int32_t b : ids) {
    if (pool_.meta(b).ref == 0 && pool_.index().contains(b)) {
      pool_.uncache(b);
      segments_.erase(b);
    }
  }
  reindex_frozen();
  return Status::ok();
}

void KvManager::relieve_frozen_pressure(int64_t extra) {
  const double limit = frozen_watermark_ * pool_.n_blocks();
  bool evicted = false;
  while (frozen_.n_frozen() > 0 && pool_.n_used() + extra > limit) {
    const std::string id = frozen_.victim()->id;
    std::vector<int32_t> ids;
    for (const BlockRef& r : frozen_.evict(id)) ids.push_back(r.id);
    pool_.release(ids);
    evicted = true;
  }
  if (evicted) reindex_frozen();
}

void KvManager::reindex_frozen() {
  for (const FrozenSegment* s : frozen_.list()) {
    if (s->evicted) continue;
    for (size_t i = 0; i < s->blocks.size(); ++i) index_frozen_block(*s, i, /*only_if_free=*/true);
  }
}

bool KvManager::is_dead(const BlockKey& key) const {
  if (key.parent == kOrphanParent) return true;  // no lookup reaches it: replaceable
  return key.parent.id >= 0 && (!pool_.is_current(key.parent) || !pool_.index().contains(key.parent.id));
}

void KvManager::free(RequestId id) {
  auto it = reqs_.find(id);
  if (it == reqs_.end()) return;
  std::vector<int32_t> reversed(it->second.blocks.rbegin(), it->second.blocks.rend());
  pool_.release(reversed);
  reqs_.erase(it);
}

void KvManager::keep_for_session(RequestId id, const std::string& key, double expires) {
  auto it = reqs_.find(id);
  if (it == reqs_.end()) return;
  sessions_.keep(key, it->second.canonical, expires);
}

const std::vector<int32_t>& KvManager::block_table(RequestId id) const {
  auto it = reqs_.find(id);
  return it == reqs_.end() ? kEmpty : it->second.blocks;
}

int32_t KvManager::num_slots(RequestId id) const {
  auto it = reqs_.find(id);
  return it == reqs_.end() ? 0 : it->second.n_slots;
}

KvUsage KvManager::usage() const {
  return {pool_.n_used(), pool_.n_cached(), pool_.n_free(), pool_.n_blocks()};
}

}  // namespace agentkv
