#include "runtime/kv_event_source.h"

#include <utility>

#include "kv/block_hash.h"

namespace agentkv {

KvEventSource::KvEventSource(int32_t block_size, std::string medium, Readers readers)
    : block_size_(block_size), medium_(std::move(medium)), readers_(std::move(readers)) {}

uint64_t KvEventSource::alias_hash(uint64_t hash, const std::string& name) {
  // A tag byte no serialised ExtraKeys starts with keeps alias hashes apart
  // from block hashes of the same parent.
  return hash_block(hash, {}, "\x7f" "alias:" + name);
}

const std::vector<std::optional<std::string>>& KvEventSource::readers_of(const std::string& lineage) {
  auto it = readers_cache_.find(lineage);
  if (it == readers_cache_.end()) it = readers_cache_.emplace(lineage, readers_(lineage)).first;
  return it->second;
}

void KvEventSource::block_stored(int32_t block, const BlockKey& key, uint64_t parent_hash) {
  const std::optional<ExtraKeys> extra = ExtraKeys::parse(key.extra);
  if (!extra || extra->approximate) return;
  const std::vector<std::optional<std::string>>& names = readers_of(extra->lineage);
  if (names.empty()) return;
  const std::vector<Announced>* parent = nullptr;
  if (parent_hash != kRootHash && key.parent.id >= 0) {
    auto it = announced_.find(key.parent.id);
    // The parent's block still holds what the key was chained from.
    if (it != announced_.end() && !it->second.empty() && it->second.front().hash == parent_hash) parent = &it->second;
  }
  std::vector<Announced> mine;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::optional<std::string>& name = names[i];
    const uint64_t h = i == 0 ? key.hash : alias_hash(key.hash, name.value_or(""));
    std::optional<uint64_t> p;
    if (parent_hash != kRootHash) {
      // The parent as announced under this name. The writer's block falls
      // back to the chain it was hashed on; an alias whose parent has no
      // alias under its name (an adapter loaded since) would hang off a
      // chain no router walks under that name, and is not announced.
      if (parent != nullptr) {
        for (const Announced& a : *parent) {
          if (a.name == name) p = a.hash;
        }
      }
      if (!p) {
        if (i > 0) continue;
        p = parent_hash;
      }
    }
    std::vector<std::string> ek;
    if (name) ek.push_back(*name);
    if (!extra->cache_salt.empty()) ek.push_back(extra->cache_salt);
    if (!extra->tenant.empty()) ek.push_back("tenant:" + extra->tenant);
    append_stored(name, h, p, key.tokens, std::move(ek));
    mine.push_back({name, h});
    ++n_hashes_;
  }
  announced_[block] = std::move(mine);
}

void KvEventSource::append_stored(const std::optional<std::string>& name, uint64_t hash,
                                  std::optional<uint64_t> parent, const std::vector<int32_t>& tokens,
                                  std::vector<std::string> extra) {
  // The next block of the last event's chain, under the same name and keys,
  // extends that event (vLLM sends a request's new blocks as one event).
  if (!pending_.empty()) {
    if (auto* last = std::get_if<KvBlockStored>(&pending_.back());
        last != nullptr && last->lora_name == name && parent && *parent == last->block_hashes.back() &&
        last->extra_keys.back() == extra) {
      last->block_hashes.push_back(hash);
      last->token_ids.insert(last->token_ids.end(), tokens.begin(), tokens.end());
      last->extra_keys.push_back(std::move(extra));
      return;
    }
  }
  KvBlockStored s;
  s.block_hashes = {hash};
  s.parent_block_hash = parent;
  s.token_ids = tokens;
  s.block_size = block_size_;
  s.lora_name = name;
  s.medium = medium_;
  s.extra_keys.push_back(std::move(extra));
  pending_.emplace_back(std::move(s));
}

void KvEventSource::block_removed(int32_t block, const BlockKey& key) {
  (void)key;
  auto it = announced_.find(block);
  if (it == announced_.end()) return;
  KvBlockRemoved r;
  r.medium = medium_;
  for (const Announced& a : it->second) r.block_hashes.push_back(a.hash);
  n_hashes_ -= static_cast<int64_t>(r.block_hashes.size());
  announced_.erase(it);
  if (!pending_.empty()) {
    if (auto* last = std::get_if<KvBlockRemoved>(&pending_.back())) {
      last->block_hashes.insert(last->block_hashes.end(), r.block_hashes.begin(), r.block_hashes.end());
      return;
    }
  }
  pending_.emplace_back(std::move(r));
}

void KvEventSource::clear_all() {
  announced_.clear();
  n_hashes_ = 0;
  pending_.emplace_back(KvAllBlocksCleared{});
}

KvEventBatch KvEventSource::take(double ts) {
  KvEventBatch b;
  b.ts = ts;
  b.events = std::move(pending_);
  pending_.clear();
  readers_cache_.clear();
  return b;
}

}  // namespace agentkv
