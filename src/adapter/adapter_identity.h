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

}  // namespace agentkv
