// The remote KV tier's client (remote_tier_client.h).
#include "runtime/remote_tier_client.h"

#include <chrono>
#include <cstring>

namespace agentkv {

class RemoteTierClient::Recorder final : public BlockObserver {
 public:
  explicit Recorder(RemoteTierClient* c) : c_(c) {}
  void block_stored(int32_t block, const BlockKey& key, uint64_t parent_hash) override {
    if (c_->importing_) return;  // it came from the tier
    const std::optional<ExtraKeys> k = ExtraKeys::parse(key.extra);
    if (!k || k->approximate || k->lineage.starts_with("shared:")) return;
    c_->stored_.push_back({block, key.hash, parent_hash, key.tokens, key.extra, *k});
  }
  void block_removed(int32_t, const BlockKey&) override {}

 private:
  RemoteTierClient* c_;
};

RemoteTierClient::RemoteTierClient(const Config& c, KvManager* kv, KvStorage* storage)
    : c_(c),
      kv_(kv),
      storage_(storage),
      block_size_(storage->geometry().block_size),
      recorder_(std::make_unique<Recorder>(this)) {}

RemoteTierClient::~RemoteTierClient() = default;

BlockObserver* RemoteTierClient::recorder() { return recorder_.get(); }

void RemoteTierClient::flush() {
  if (stored_.empty()) return;
  const int64_t bytes = storage_->geometry().block_bytes();
  std::vector<std::pair<std::string, std::string>> refs;
  for (const Stored& s : stored_) {
    // Still this content (an eviction in the same step may have reused the block).
    const BlockKey* k = kv_->pool().index().key_of(s.block);
    if (k == nullptr || k->hash != s.hash) continue;
    const RemoteBlockKey rk{c_.model_tag, s.hash, s.parent, s.tokens, s.extra};
    c_.tier->put(remote_block_name(c_.model_tag, s.keys, s.hash),
                 encode_remote_block(rk, {storage_->block_data(s.block), static_cast<size_t>(bytes)}));
    const uint64_t seg = hash_block(kRootHash, s.tokens, s.extra);
    const SegmentEntry* e = kv_->segments().find(seg);
    if (e != nullptr && e->block == kv_->pool().ref_of(s.block)) {
      refs.emplace_back(remote_segment_name(c_.model_tag, s.keys, seg),
                        encode_remote_segment_ref(c_.model_tag, seg, {s.hash, s.parent, e->pos}));
    }
  }
  // After the blocks: a replica that finds a ref finds its block.
  for (auto& [key, value] : refs) c_.tier->put_ref(std::move(key), std::move(value));
  stored_.clear();
}

namespace {

// Segment refs asked for per request, at most: one per token offset.
constexpr int32_t kMaxWindows = 16384;

// Seconds on the steady clock (deadlines).
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

bool RemoteTierClient::lookup(SchedRequest* r, bool segments, int32_t min_segment) {
  const int32_t bs = block_size_;
  if (!c_.prefix_caching || !r->read_cache || r->cache.keys.lineage.starts_with("shared:") ||
      r->n_prompt < 2) {
    return false;
  }
  const int32_t n_full = (r->n_prompt - 1) / bs;  // never the block of the last token
  const int32_t from = r->cache.lookup(*kv_, r->tokens).n_blocks();
  if (from >= n_full && !segments) return false;
  Wait w;
  w.from = from;
  w.min_segment = min_segment;
  const std::string base_extra = r->cache.base_keys.serialize(), extra = r->cache.keys.serialize();
  std::vector<std::string> names;
  uint64_t h = kRootHash;
  for (int32_t i = 0; i < n_full; ++i) {
    const bool base = i < r->cache.base_blocks;
    h = hash_block(h, std::span<const int32_t>(r->tokens.data() + static_cast<size_t>(i) * bs, bs),
                   base ? base_extra : extra);
    w.hashes.push_back(h);
    if (i >= from)
      names.push_back(remote_block_name(c_.model_tag, base ? r->cache.base_keys : r->cache.keys, h));
  }
  if (segments && !r->cache.keys.approximate) {
    // Windows past the cached prefix, as the matcher slides (it never covers
    // the last token), that no cached block holds already.
    for (int32_t o = from * bs;
         o + bs <= r->n_prompt - 1 && static_cast<int32_t>(w.windows.size()) < kMaxWindows; ++o) {
      const uint64_t seg = hash_block(kRootHash, std::span<const int32_t>(r->tokens.data() + o, bs), extra);
      if (kv_->segment_held(seg)) continue;
      w.windows.push_back(o);
      names.push_back(remote_segment_name(c_.model_tag, r->cache.keys, seg));
    }
  }
  if (names.empty()) return false;
  // Wait no longer than recomputing the missing tokens would take.
  const int32_t missing = r->n_prompt - from * bs;
  const double recompute = s_per_token_ > 0 ? s_per_token_ * missing : c_.wait_s;
  w.deadline = now_seconds() + std::min(c_.wait_s, recompute);
  const uint64_t id = r->id;
  w.r = r;
  c_.tier->get(id, std::move(names));
  wait_.emplace(id, std::move(w));
  return true;
}

bool RemoteTierClient::prefix_answer(Wait& w, KvRemoteTier::Answer& a, Polled* out) {
  const int32_t bs = block_size_;
  const size_t bytes = static_cast<size_t>(storage_->geometry().block_bytes());
  SchedRequest& r = *w.r;
  const std::string base_extra = r.cache.base_keys.serialize(), extra = r.cache.keys.serialize();
  const size_t n_prefix = w.hashes.size() - static_cast<size_t>(w.from);
  std::vector<std::span<const uint8_t>> payloads;
  for (size_t j = 0; j < n_prefix && j < a.values.size(); ++j) {
    if (!a.values[j]) break;
    const int32_t i = w.from + static_cast<int32_t>(j);
    const RemoteBlockKey k{c_.model_tag, w.hashes[i], i == 0 ? kRootHash : w.hashes[i - 1],
                           std::span<const int32_t>(r.tokens.data() + static_cast<size_t>(i) * bs, bs),
                           i < r.cache.base_blocks ? base_extra : extra};
    const auto p = decode_remote_block(*a.values[j], k, bytes);
    if (!p) {
      ++out->invalid;  // torn, foreign or stale: a miss
      break;
    }
    payloads.push_back(*p);
  }
  int32_t prefix_end = w.from;
  if (!payloads.empty()) {
    importing_ = true;
    const std::vector<int32_t> blocks =
        kv_->import_blocks(r.tokens, r.cache.base_keys, r.cache.base_blocks, r.cache.keys, w.from,
                           static_cast<int32_t>(payloads.size()));
    for (size_t k = 0; k < blocks.size(); ++k)
      std::memcpy(storage_->block_data(blocks[k]), payloads[k].data(), bytes);
    kv_->release_imported(blocks);
    importing_ = false;
    out->blocks_loaded += static_cast<int64_t>(blocks.size());
    prefix_end += static_cast<int32_t>(blocks.size());
  }
  if (w.windows.empty()) return false;
  // Runs of windows whose refs came, taken left to right without overlap.
  std::vector<Wait::Picked> picked;
  int32_t next = prefix_end * bs;
  for (size_t j = 0; j < w.windows.size(); ++j) {
    const int32_t o = w.windows[j];
    const size_t v = n_prefix + j;
    if (o < next || v >= a.values.size() || !a.values[v]) continue;
    const uint64_t seg = hash_block(kRootHash, std::span<const int32_t>(r.tokens.data() + o, bs), extra);
    const std::optional<RemoteSegmentRef> ref = decode_remote_segment_ref(*a.values[v], c_.model_tag, seg);
    if (!ref) {
      ++out->invalid;
      continue;
    }
    picked.push_back({o, *ref});
    next = o + bs;
  }
  // Runs shorter than the request's minimum segment would be dropped anyway.
  const int32_t min_tokens = w.min_segment;
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
  for (const Wait::Picked& p : w.picked)
    names.push_back(remote_block_name(c_.model_tag, r.cache.keys, p.ref.hash));
  c_.tier->get(a.ticket, std::move(names));
  return true;
}

void RemoteTierClient::segment_answer(Wait& w, KvRemoteTier::Answer& a, Polled* out) {
  const int32_t bs = block_size_;
  const size_t bytes = static_cast<size_t>(storage_->geometry().block_bytes());
  SchedRequest& r = *w.r;
  const std::string extra = r.cache.keys.serialize();
  std::vector<KvManager::SegmentBlockImport> items;
  std::vector<std::span<const uint8_t>> payloads;
  for (size_t j = 0; j < w.picked.size() && j < a.values.size(); ++j) {
    if (!a.values[j]) continue;
    const Wait::Picked& p = w.picked[j];
    const std::span<const int32_t> tokens(r.tokens.data() + p.at, bs);
    const RemoteBlockKey k{c_.model_tag, p.ref.hash, p.ref.parent_hash, tokens, extra};
    const auto v = decode_remote_block(*a.values[j], k, bytes);
    // The ref's hash must be the block's own chain hash: the prefix index
    // then holds it under the hash its content has.
    if (!v || hash_block(p.ref.parent_hash, tokens, extra) != p.ref.hash) {
      ++out->invalid;
      continue;
    }
    items.push_back({tokens, p.ref.hash, p.ref.parent_hash, p.ref.pos});
    payloads.push_back(*v);
  }
  if (items.empty()) return;
  importing_ = true;
  const std::vector<int32_t> blocks = kv_->import_segment_blocks(r.cache.keys, items);
  for (size_t k = 0; k < blocks.size(); ++k) {
    if (blocks[k] < 0) continue;
    std::memcpy(storage_->block_data(blocks[k]), payloads[k].data(), bytes);
    ++out->blocks_loaded;
  }
  kv_->release_imported(blocks);
  importing_ = false;
}

RemoteTierClient::Polled RemoteTierClient::poll(const std::function<bool(uint64_t)>& live) {
  Polled p;
  for (KvRemoteTier::Answer& a : c_.tier->poll()) {
    auto it = wait_.find(a.ticket);
    if (it == wait_.end()) continue;  // gave up on it already
    if (!live(a.ticket)) {            // cancelled while it waited
      wait_.erase(it);
      continue;
    }
    Wait& w = it->second;
    if (w.picked.empty()) {
      if (prefix_answer(w, a, &p)) continue;  // asked again: still waiting
    } else {
      segment_answer(w, a, &p);
    }
    p.ready.push_back(w.r);
    wait_.erase(it);
  }
  const double now = now_seconds();
  for (auto it = wait_.begin(); it != wait_.end();) {
    if (now < it->second.deadline) {
      ++it;
      continue;
    }
    if (live(it->first)) {
      p.ready.push_back(it->second.r);
      ++p.timeouts;
    }
    it = wait_.erase(it);
  }
  p.bytes_loaded = p.blocks_loaded * storage_->geometry().block_bytes();
  return p;
}

}  // namespace agentkv
