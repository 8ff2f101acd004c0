#include "kv/frozen_segments.h"

#include <algorithm>

namespace agentkv {

bool FrozenSegments::add(FrozenSegment seg) {
  if (segs_.count(seg.id) != 0) return false;
  seg.evicted = false;
  seg.n_blocks = static_cast<int32_t>(seg.blocks.size());
  seg.last_use = ++clock_;
  for (const BlockRef& b : seg.blocks) by_block_[b.id].push_back(seg.id);
  const std::string id = seg.id;
  segs_.emplace(id, std::move(seg));
  ++n_frozen_;
  return true;
}

void FrozenSegments::unpin(const FrozenSegment& s) {
  for (const BlockRef& b : s.blocks) {
    auto it = by_block_.find(b.id);
    if (it == by_block_.end()) continue;
    std::vector<std::string>& ids = it->second;
    auto pos = std::find(ids.begin(), ids.end(), s.id);  // once per reference it took
    if (pos != ids.end()) ids.erase(pos);
    if (ids.empty()) by_block_.erase(it);
  }
}

std::optional<std::vector<BlockRef>> FrozenSegments::remove(const std::string& id) {
  auto it = segs_.find(id);
  if (it == segs_.end()) return std::nullopt;
  std::vector<BlockRef> blocks = std::move(it->second.blocks);
  if (it->second.evicted) {
    evicted_order_.erase(std::remove(evicted_order_.begin(), evicted_order_.end(), id), evicted_order_.end());
  } else {
    it->second.blocks = blocks;
    unpin(it->second);
    --n_frozen_;
  }
  segs_.erase(it);
  return blocks;
}

std::vector<BlockRef> FrozenSegments::evict(const std::string& id) {
  auto it = segs_.find(id);
  if (it == segs_.end() || it->second.evicted) return {};
  FrozenSegment& s = it->second;
  unpin(s);
  std::vector<BlockRef> blocks = std::move(s.blocks);
  s.blocks.clear();
  s.evicted = true;
  --n_frozen_;
  ++n_evictions_;
  evicted_order_.push_back(id);
  if (evicted_order_.size() > kMaxEvictedKept) {
    segs_.erase(evicted_order_.front());
    evicted_order_.erase(evicted_order_.begin());
  }
  return blocks;
}

const FrozenSegment* FrozenSegments::victim() const {
  const FrozenSegment* best = nullptr;
  for (const auto& [id, s] : segs_) {
    if (s.evicted) continue;
    if (best == nullptr || s.hits < best->hits || (s.hits == best->hits && s.last_use < best->last_use))
      best = &s;
  }
  return best;
}

void FrozenSegments::record_hit(int32_t block, int64_t now_ms) {
  auto it = by_block_.find(block);
  if (it == by_block_.end()) return;
  const uint64_t t = ++clock_;
  for (const std::string& id : it->second) {
    FrozenSegment& s = segs_.at(id);
    ++s.hits;
    s.last_use = t;
    s.last_used_ms = now_ms;
  }
}

const FrozenSegment* FrozenSegments::find(const std::string& id) const {
  auto it = segs_.find(id);
  return it == segs_.end() ? nullptr : &it->second;
}

std::vector<const FrozenSegment*> FrozenSegments::list() const {
  std::vector<const FrozenSegment*> out;
  out.reserve(segs_.size());
  for (const auto& [id, s] : segs_) out.push_back(&s);
  return out;
}

}  // namespace agentkv
