// KV cache events: what a prefix-aware router needs to know of the engine's
// prefix cache, as vLLM publishes it (vllm/distributed/kv_events.py, vLLM
// 0.33.0): a block stored under a hash chained from its parent's, a block
// removed, everything cleared. The engine produces them (ServingOptions::
// kv_events); src/cluster encodes and sends them. Plain data, no transport.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace agentkv {

// Consecutive full blocks of one chain, stored under one name.
struct KvBlockStored {
  std::vector<uint64_t> block_hashes;
  std::optional<uint64_t> parent_block_hash;  // nullopt: the first block of a sequence
  std::vector<int32_t> token_ids;             // block_size per hash, in order
  int32_t block_size = 0;
  std::optional<std::string> lora_name;       // nullopt: the base model
  std::string medium;                         // where the blocks live: "CPU" (the engine's pool)
  // Per block: the extra keys of its hash, untagged (the adapter name when
  // lora_name is set, then the cache_salt, then "tenant:<name>"). An empty
  // entry is encoded as None.
  std::vector<std::vector<std::string>> extra_keys;
};

struct KvBlockRemoved {
  std::vector<uint64_t> block_hashes;
  std::string medium;
};

struct KvAllBlocksCleared {};

using KvEvent = std::variant<KvBlockStored, KvBlockRemoved, KvAllBlocksCleared>;

struct KvEventBatch {
  double ts = 0;  // unix seconds
  std::vector<KvEvent> events;
};

// Called on the engine thread once per step that changed the prefix cache;
// must not block (queue the batch and return).
using KvEventSink = std::function<void(KvEventBatch&&)>;

}  // namespace agentkv
