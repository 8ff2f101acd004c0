// KV cache events from the prefix index (kv/block_observer.h): each block
// registered is announced as BlockStored under the name of every model whose
// requests can hit it, and each block forgotten as BlockRemoved of every hash
// it was announced under (include/agentkv/kv_events.h).
//
// Names. A block is announced first under the model that wrote it (its
// lineage: the base, an adapter, or a shared lineage under the base's name),
// then under aliases: the adapters that read that lineage too (an aLoRA
// adapter before its invocation, an ICaRus decoder: the scheme says, through
// SharingScheme::reads_lineage). An alias gets its own hash,
// alias_hash(primary, name), chained from the parent's alias under the same
// name, so a router that keys blocks by (hash, lora_name) sees one
// consistent chain per name; an alias whose parent has none (an adapter
// loaded after the parent was stored) is not announced. Blocks with approximate K/V (segment reuse) are
// not announced: they never serve a prefix hit.
//
// Engine thread only. Events wait here until take(), once per step.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "agentkv/kv_events.h"
#include "kv/block_observer.h"

namespace agentkv {

class KvEventSource final : public BlockObserver {
 public:
  // The models whose requests can hit a block of `lineage` (ExtraKeys::
  // lineage): the writer first (nullopt: the base), then its aliases.
  using Readers = std::function<std::vector<std::optional<std::string>>(const std::string& lineage)>;

  KvEventSource(int32_t block_size, std::string medium, Readers readers);

  void block_stored(int32_t block, const BlockKey& key, uint64_t parent_hash) override;
  void block_removed(int32_t block, const BlockKey& key) override;
  // Queues AllBlocksCleared (a fresh engine: subscribers forget this replica).
  void clear_all();

  bool has_events() const { return !pending_.empty(); }
  // The events since the last take(), stamped ts; the readers are asked
  // again from here on (adapters may have been loaded or unloaded).
  KvEventBatch take(double ts);
  // Hashes announced and not yet removed (aliases included).
  int64_t n_hashes() const { return n_hashes_; }

  // The hash an alias of block `hash` is announced under for model `name`.
  static uint64_t alias_hash(uint64_t hash, const std::string& name);

 private:
  struct Announced {
    std::optional<std::string> name;
    uint64_t hash = 0;
  };
  const std::vector<std::optional<std::string>>& readers_of(const std::string& lineage);
  void append_stored(const std::optional<std::string>& name, uint64_t hash, std::optional<uint64_t> parent,
                     const std::vector<int32_t>& tokens, std::vector<std::string> extra);

  int32_t block_size_;
  std::string medium_;
  Readers readers_;
  std::unordered_map<std::string, std::vector<std::optional<std::string>>> readers_cache_;
  // Per block id: the hashes its current content is announced under, the
  // writer's first.
  std::unordered_map<int32_t, std::vector<Announced>> announced_;
  std::vector<KvEvent> pending_;
  int64_t n_hashes_ = 0;
};

}  // namespace agentkv
