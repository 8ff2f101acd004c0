// The remote KV tier in the engine (ServingOptions::kv_remote): exact blocks
// the prefix index registers are written to the tier at the end of their
// step; a fresh request whose prompt prefix is not cached here asks the tier
// for the missing blocks and waits, before the scheduler sees it, until the
// answer comes or until recomputing would have been done (the moving
// average of prefill seconds per token, capped by kv_remote_wait_s). Blocks
// that verify (kv/remote_block.h) are registered like computed ones, so the
// scheduler finds them as an ordinary prefix hit.
//
// Only the exact schemes' blocks travel (base and adapter lineages: none,
// alora, icarus): shared-K/V lineages carry per-slot components (DroidSpeak
// owners, LRAgent's V without its LoRA term) that the tier does not keep, and
// requests with a segment-reuse planner or relay captures do not ask.
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
  for (const RemoteStored& s : remote_stored_) {
    // Still this content (an eviction in the same step may have reused the block).
    const BlockKey* k = kv_->pool().index().key_of(s.block);
    if (k == nullptr || k->hash != s.hash) continue;
    const RemoteBlockKey rk{remote_model_tag_, s.hash, s.parent, s.tokens, s.extra};
    opts_.kv_remote->put(remote_block_name(remote_model_tag_, s.keys, s.hash),
                         encode_remote_block(rk, {storage_->block_data(s.block), static_cast<size_t>(bytes)}));
  }
  remote_stored_.clear();
}

bool ServingEngineImpl::remote_lookup(std::unique_ptr<SchedRequest>& r) {
  const int32_t bs = opts_.block_size;
  if (!opts_.kv_remote || !opts_.prefix_caching || !r->read_cache || r->keys.lineage.starts_with("shared:") ||
      r->n_prompt < 2) {
    return false;
  }
  const auto lit = live_.find(r->id);
  if (lit == live_.end() || lit->second.planner || lit->second.capture) return false;
  const int32_t n_full = (r->n_prompt - 1) / bs;  // never the block of the last token
  const int32_t from = kv_->get_computed_blocks_split(r->tokens, r->base_keys, r->lineage_block, r->keys).n_blocks();
  if (from >= n_full) return false;
  RemoteWait w;
  w.from = from;
  const std::string base_extra = r->base_keys.serialize(), extra = r->keys.serialize();
  std::vector<std::string> names;
  uint64_t h = kRootHash;
  for (int32_t i = 0; i < n_full; ++i) {
    const bool base = i < r->lineage_block;
    h = hash_block(h, std::span<const int32_t>(r->tokens.data() + static_cast<size_t>(i) * bs, bs),
                   base ? base_extra : extra);
    w.hashes.push_back(h);
    if (i >= from) names.push_back(remote_block_name(remote_model_tag_, base ? r->base_keys : r->keys, h));
  }
  // Wait no longer than recomputing the missing blocks would take.
  const double recompute = prefill_s_per_token_ > 0 ? prefill_s_per_token_ * (n_full - from) * bs : opts_.kv_remote_wait_s;
  w.deadline = clock_seconds() + std::min(opts_.kv_remote_wait_s, recompute);
  const ServeId id = r->id;
  w.r = std::move(r);
  opts_.kv_remote->get(id, std::move(names));
  remote_wait_.emplace(id, std::move(w));
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.remote_lookups;
  return true;
}

void ServingEngineImpl::remote_poll() {
  if (!opts_.kv_remote) return;
  const int32_t bs = opts_.block_size;
  const size_t bytes = static_cast<size_t>(storage_->geometry().block_bytes());
  int64_t loaded = 0, invalid = 0, timeouts = 0;
  for (KvRemoteTier::Answer& a : opts_.kv_remote->poll()) {
    auto it = remote_wait_.find(a.ticket);
    if (it == remote_wait_.end()) continue;  // gave up on it already
    RemoteWait w = std::move(it->second);
    remote_wait_.erase(it);
    if (!live_.count(a.ticket)) continue;  // cancelled while it waited
    SchedRequest& r = *w.r;
    const std::string base_extra = r.base_keys.serialize(), extra = r.keys.serialize();
    std::vector<std::span<const uint8_t>> payloads;
    for (size_t j = 0; j < a.values.size(); ++j) {
      if (!a.values[j]) break;
      const int32_t i = w.from + static_cast<int32_t>(j);
      const RemoteBlockKey k{remote_model_tag_, w.hashes[i], i == 0 ? kRootHash : w.hashes[i - 1],
                             std::span<const int32_t>(r.tokens.data() + static_cast<size_t>(i) * bs, bs),
                             i < r.lineage_block ? base_extra : extra};
      const auto p = decode_remote_block(*a.values[j], k, bytes);
      if (!p) {
        ++invalid;  // torn, foreign or stale: a miss
        break;
      }
      payloads.push_back(*p);
    }
    if (!payloads.empty()) {
      remote_importing_ = true;
      const std::vector<int32_t> blocks = kv_->import_blocks(r.tokens, r.base_keys, r.lineage_block, r.keys, w.from,
                                                             static_cast<int32_t>(payloads.size()));
      for (size_t k = 0; k < blocks.size(); ++k) std::memcpy(storage_->block_data(blocks[k]), payloads[k].data(), bytes);
      kv_->release_imported(blocks);
      remote_importing_ = false;
      loaded += static_cast<int64_t>(blocks.size());
    }
    sched_->add(std::move(w.r));
  }
  const double now = clock_seconds();
  for (auto it = remote_wait_.begin(); it != remote_wait_.end();) {
    if (now < it->second.deadline) {
      ++it;
      continue;
    }
    if (live_.count(it->first)) {
      sched_->add(std::move(it->second.r));
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
