// The remote KV tier in the engine (ServingOptions::kv_remote): exact blocks
// the prefix index registers are written to the tier at the end of their
// step, each with a segment ref when the segment index holds it; a fresh
// request whose prompt prefix is not cached here asks the tier for the
// missing blocks and waits, before the scheduler sees it, until the answer
// comes or until recomputing would have been done (the moving average of
// prefill seconds per token, capped by kv_remote_wait_s). Blocks that verify
// (kv/remote_block.h) are registered like computed ones, so the scheduler
// finds them as an ordinary prefix hit.
//
// A request with a segment-reuse planner also asks for the segment refs of
// every block-sized window of its prompt past the prefix (at most
// kMaxWindows), picks non-overlapping runs of windows found as the local
// matcher would (runs shorter than the request's minimum segment are left),
// asks for the blocks they name, and imports those that verify into the
// segment index: the planner then finds them as local segment hits, at any
// offset. Only whole blocks travel: a hit's single-token extensions into the
// blocks around it (kv/segment_match.h) need those neighbours here.
//
// Only the exact schemes' blocks travel (base and adapter lineages): shared-K/V
// lineages carry per-slot components (DroidSpeak owners, LRAgent's V without
// its LoRA term) that the tier does not keep, approximate blocks are never
// written, and requests with relay captures do not ask.
#include <cstring>

#include "kv/remote_block.h"
#include "runtime/serving_engine_impl.h"

namespace agentkv {

class ServingEngineImpl::RemoteRecorder final : public BlockObserver {
 public:
  explicit RemoteRecorder(ServingEngineImpl* e) : e_(e) {}
  void block_stored(int32_t block, const BlockKey& key, uint64_t parent_hash) override {
    if (e_->remote_importing_) return;  // it came from the tier
    const std::optional<ExtraKeys> k = ExtraKeys::parse(key.extra);
    if (!k || k->approximate || k->lineage.starts_with("shared:")) return;
    e_->remote_stored_.push_back({block, key.hash, parent_hash, key.tokens, key.extra, *k});
  }
  void block_removed(int32_t, const BlockKey&) override {}

 private:
  ServingEngineImpl* e_;
};

std::unique_ptr<BlockObserver> ServingEngineImpl::make_remote_recorder() {
  return std::make_unique<RemoteRecorder>(this);
}

void ServingEngineImpl::remote_flush() {
  if (remote_stored_.empty()) return;
  const int64_t bytes = storage_->geometry().block_bytes();
  std::vector<std::pair<std::string, std::string>> refs;
  for (const RemoteStored& s : remote_stored_) {
    // Still this content (an eviction in the same step may have reused the block).
    const BlockKey* k = kv_->pool().index().key_of(s.block);
    if (k == nullptr || k->hash != s.hash) continue;
    const RemoteBlockKey rk{remote_model_tag_, s.hash, s.parent, s.tokens, s.extra};
    opts_.kv_remote->put(remote_block_name(remote_model_tag_, s.keys, s.hash),
                         encode_remote_block(rk, {storage_->block_data(s.block), static_cast<size_t>(bytes)}));
    const uint64_t seg = hash_block(kRootHash, s.tokens, s.extra);
    const SegmentEntry* e = kv_->segments().find(seg);
    if (e != nullptr && e->block == kv_->pool().ref_of(s.block)) {
      refs.emplace_back(remote_segment_name(remote_model_tag_, s.keys, seg),
                        encode_remote_segment_ref(remote_model_tag_, seg, {s.hash, s.parent, e->pos}));
    }
  }
  // After the blocks: a replica that finds a ref finds its block.
  for (auto& [key, value] : refs) opts_.kv_remote->put_ref(std::move(key), std::move(value));
  remote_stored_.clear();
}

namespace {

// Segment refs asked for per request, at most: one per token offset.
constexpr int32_t kMaxWindows = 16384;

}  // namespace

bool ServingEngineImpl::remote_lookup(SchedRequest* r) {
  const int32_t bs = opts_.block_size;
  if (!opts_.kv_remote || !opts_.prefix_caching || !r->read_cache ||
      r->cache.keys.lineage.starts_with("shared:") || r->n_prompt < 2) {
    return false;
  }
  const auto lit = live_.find(r->id);
  if (lit == live_.end() || lit->second->capture) return false;
  const bool segments = lit->second->plan->reuses_segments();
  const int32_t n_full = (r->n_prompt - 1) / bs;  // never the block of the last token
  const int32_t from = r->cache.lookup(*kv_, r->tokens).n_blocks();
  if (from >= n_full && !segments) return false;
  RemoteWait w;
  w.from = from;
  const std::string base_extra = r->cache.base_keys.serialize(), extra = r->cache.keys.serialize();
  std::vector<std::string> names;
  uint64_t h = kRootHash;
  for (int32_t i = 0; i < n_full; ++i) {
    const bool base = i < r->cache.base_blocks;
    h = hash_block(h, std::span<const int32_t>(r->tokens.data() + static_cast<size_t>(i) * bs, bs),
                   base ? base_extra : extra);
    w.hashes.push_back(h);
    if (i >= from)
      names.push_back(remote_block_name(remote_model_tag_, base ? r->cache.base_keys : r->cache.keys, h));
  }
  if (segments && !r->cache.keys.approximate) {
    // Windows past the cached prefix, as the matcher slides (it never covers
    // the last token), that no cached block holds already.
    for (int32_t o = from * bs;
         o + bs <= r->n_prompt - 1 && static_cast<int32_t>(w.windows.size()) < kMaxWindows; ++o) {
      const uint64_t seg = hash_block(kRootHash, std::span<const int32_t>(r->tokens.data() + o, bs), extra);
      if (kv_->segment_held(seg)) continue;
      w.windows.push_back(o);
      names.push_back(remote_segment_name(remote_model_tag_, r->cache.keys, seg));
    }
  }
  if (names.empty()) return false;
  // Wait no longer than recomputing the missing tokens would take.
  const int32_t missing = r->n_prompt - from * bs;
  const double recompute = prefill_s_per_token_ > 0 ? prefill_s_per_token_ * missing : opts_.kv_remote_wait_s;
  w.deadline = clock_seconds() + std::min(opts_.kv_remote_wait_s, recompute);
  const ServeId id = r->id;
  w.r = r;
  opts_.kv_remote->get(id, std::move(names));
  remote_wait_.emplace(id, std::move(w));
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.remote_lookups;
  return true;
}

bool ServingEngineImpl::remote_prefix_answer(RemoteWait& w, KvRemoteTier::Answer& a, int64_t* loaded,
                                             int64_t* invalid) {
  const int32_t bs = opts_.block_size;
  const size_t bytes = static_cast<size_t>(storage_->geometry().block_bytes());
  SchedRequest& r = *w.r;
  const std::string base_extra = r.cache.base_keys.serialize(), extra = r.cache.keys.serialize();
  const size_t n_prefix = w.hashes.size() - static_cast<size_t>(w.from);
  std::vector<std::span<const uint8_t>> payloads;
  for (size_t j = 0; j < n_prefix && j < a.values.size(); ++j) {
    if (!a.values[j]) break;
    const int32_t i = w.from + static_cast<int32_t>(j);
    const RemoteBlockKey k{remote_model_tag_, w.hashes[i], i == 0 ? kRootHash : w.hashes[i - 1],
                           std::span<const int32_t>(r.tokens.data() + static_cast<size_t>(i) * bs, bs),
                           i < r.cache.base_blocks ? base_extra : extra};
    const auto p = decode_remote_block(*a.values[j], k, bytes);
    if (!p) {
      ++*invalid;  // torn, foreign or stale: a miss
      break;
    }
    payloads.push_back(*p);
  }
  int32_t prefix_end = w.from;
  if (!payloads.empty()) {
    remote_importing_ = true;
    const std::vector<int32_t> blocks =
        kv_->import_blocks(r.tokens, r.cache.base_keys, r.cache.base_blocks, r.cache.keys, w.from,
                           static_cast<int32_t>(payloads.size()));
    for (size_t k = 0; k < blocks.size(); ++k)
      std::memcpy(storage_->block_data(blocks[k]), payloads[k].data(), bytes);
    kv_->release_imported(blocks);
    remote_importing_ = false;
    *loaded += static_cast<int64_t>(blocks.size());
    prefix_end += static_cast<int32_t>(blocks.size());
  }
  if (w.windows.empty()) return false;
  // Runs of windows whose refs came, taken left to right without overlap.
  std::vector<RemoteWait::Picked> picked;
  int32_t next = prefix_end * bs;
  for (size_t j = 0; j < w.windows.size(); ++j) {
    const int32_t o = w.windows[j];
    const size_t v = n_prefix + j;
    if (o < next || v >= a.values.size() || !a.values[v]) continue;
    const uint64_t seg = hash_block(kRootHash, std::span<const int32_t>(r.tokens.data() + o, bs), extra);
    const std::optional<RemoteSegmentRef> ref =
        decode_remote_segment_ref(*a.values[v], remote_model_tag_, seg);
    if (!ref) {
      ++*invalid;
      continue;
    }
    picked.push_back({o, *ref});
    next = o + bs;
  }
  // Runs shorter than the request's minimum segment would be dropped anyway.
  const int32_t min_tokens = live_.at(a.ticket)->min_segment;
  w.picked.clear();
  for (size_t i = 0; i < picked.size();) {
    size_t j = i + 1;
    while (j < picked.size() && picked[j].at == picked[j - 1].at + bs) ++j;
    if (static_cast<int32_t>(j - i) * bs >= min_tokens)
      w.picked.insert(w.picked.end(), picked.begin() + i, picked.begin() + j);
    i = j;
  }
  w.windows.clear();
  if (w.picked.empty()) return false;
  std::vector<std::string> names;
  for (const RemoteWait::Picked& p : w.picked)
    names.push_back(remote_block_name(remote_model_tag_, r.cache.keys, p.ref.hash));
  opts_.kv_remote->get(a.ticket, std::move(names));
  return true;
}

void ServingEngineImpl::remote_segment_answer(RemoteWait& w, KvRemoteTier::Answer& a, int64_t* loaded,
                                              int64_t* invalid) {
  const int32_t bs = opts_.block_size;
  const size_t bytes = static_cast<size_t>(storage_->geometry().block_bytes());
  SchedRequest& r = *w.r;
  const std::string extra = r.cache.keys.serialize();
  std::vector<KvManager::SegmentBlockImport> items;
  std::vector<std::span<const uint8_t>> payloads;
  for (size_t j = 0; j < w.picked.size() && j < a.values.size(); ++j) {
    if (!a.values[j]) continue;
    const RemoteWait::Picked& p = w.picked[j];
    const std::span<const int32_t> tokens(r.tokens.data() + p.at, bs);
    const RemoteBlockKey k{remote_model_tag_, p.ref.hash, p.ref.parent_hash, tokens, extra};
    const auto v = decode_remote_block(*a.values[j], k, bytes);
    // The ref's hash must be the block's own chain hash: the prefix index
    // then holds it under the hash its content has.
    if (!v || hash_block(p.ref.parent_hash, tokens, extra) != p.ref.hash) {
      ++*invalid;
      continue;
    }
    items.push_back({tokens, p.ref.hash, p.ref.parent_hash, p.ref.pos});
    payloads.push_back(*v);
  }
  if (items.empty()) return;
  remote_importing_ = true;
  const std::vector<int32_t> blocks = kv_->import_segment_blocks(r.cache.keys, items);
  for (size_t k = 0; k < blocks.size(); ++k) {
    if (blocks[k] < 0) continue;
    std::memcpy(storage_->block_data(blocks[k]), payloads[k].data(), bytes);
    ++*loaded;
  }
  kv_->release_imported(blocks);
  remote_importing_ = false;
}

void ServingEngineImpl::remote_poll() {
  if (!opts_.kv_remote) return;
  const size_t bytes = static_cast<size_t>(storage_->geometry().block_bytes());
  int64_t loaded = 0, invalid = 0, timeouts = 0;
  for (KvRemoteTier::Answer& a : opts_.kv_remote->poll()) {
    auto it = remote_wait_.find(a.ticket);
    if (it == remote_wait_.end()) continue;  // gave up on it already
    if (!live_.count(a.ticket)) {            // cancelled while it waited
      remote_wait_.erase(it);
      continue;
    }
    RemoteWait& w = it->second;
    if (w.picked.empty()) {
      if (remote_prefix_answer(w, a, &loaded, &invalid)) continue;  // asked again: still waiting
    } else {
      remote_segment_answer(w, a, &loaded, &invalid);
    }
    sched_->add(w.r);
    remote_wait_.erase(it);
  }
  const double now = clock_seconds();
  for (auto it = remote_wait_.begin(); it != remote_wait_.end();) {
    if (now < it->second.deadline) {
      ++it;
      continue;
    }
    if (live_.count(it->first)) {
      sched_->add(it->second.r);
      ++timeouts;
    }
    it = remote_wait_.erase(it);
  }
  if (loaded + invalid + timeouts > 0) {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.remote_blocks_loaded += loaded;
    stats_.remote_bytes_loaded += loaded * static_cast<int64_t>(bytes);
    stats_.remote_invalid += invalid;
    stats_.remote_timeouts += timeouts;
  }
}

}  // namespace agentkv
