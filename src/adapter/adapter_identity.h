// An adapter's identity: a content hash, not its name. Two names for the same
// bytes share KV lineage; the same name reloaded with new bytes does not.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "adapter/adapter.h"
#include "util/status.h"

namespace agentkv {

// One file of an adapter: its base name ("adapter_config.json") and the very
// bytes the loader parsed (hashing the parsed buffer, not a second read, so
// the id cannot describe other bytes than the matrices).
using AdapterFileBytes = std::pair<std::string, std::span<const uint8_t>>;

// Hex XXH3-128 over a version tag, the kind, and each file as (length-prefixed
// name, length-prefixed bytes), in the order given. The kind is part of the
// identity because it changes which KV an adapter may share.
std::string adapter_content_id(AdapterKind kind, const std::vector<AdapterFileBytes>& files);

// Hex XXH3-128 over the v_proj lora_A of every layer (rank, input size and
// the floats' bytes), "" when no layer has one: the key of an adapter's
// shared-A group (LRAgent BaseLRShared: X·A is the same for every adapter
// of the group, so their LR caches are one).
std::string adapter_v_a_id(const Adapter& a);

// Whether two adapters' v_proj A are bit for bit the same in every layer
// (what a matching v_a_id promises; checked, so a hash collision never
// shares an LR cache).
bool adapter_v_a_equal(const Adapter& x, const Adapter& y);

}  // namespace agentkv
