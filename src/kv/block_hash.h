// Chained hashes of FULL KV blocks: H(parent hash, token ids, extra keys).
// The extra keys say who produced the KV (lineage) and who may see it
// (namespace). They are typed and length-prefixed, so two different key sets
// never serialise to the same bytes: untyped concatenation let a LoRA name
// alias a cache salt in vLLM/SGLang/LMCache (STYLE.md).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace agentkv {

// Tag byte of each extra key in the serialised form. Values are part of the
// hash: never renumber, only append.
enum class ExtraKeyKind : uint8_t {
  kLineage = 1,    // "" = base model; else the adapter's (or shared-A group's) content hash
  kTenant = 2,     // namespace, part 1
  kCacheSalt = 3,  // namespace, part 2 (OpenAI-style cache_salt)
  kApproximate = 4,  // K/V computed over reused (approximate) context: segment reuse only
};

struct ExtraKeys {
  std::string lineage;
  std::string tenant;
  std::string cache_salt;
  // The block's K/V is approximate: computed over K/V that a segment-reuse
  // scheme copied rather than recomputed. Such blocks never serve an exact
  // prefix hit; segment-reuse requests may reuse them (KvManager::find_segments).
  bool approximate = false;

  // tag(1) | length(u32 little-endian) | bytes, for every key in kind order.
  // Every string key is written even when empty, so presence cannot alias
  // either; kApproximate (no bytes) is written only when set, after them,
  // which keeps exact blocks' hashes as they were.
  std::string serialize() const;
  // The inverse of serialize(): nullopt for bytes serialize() never writes
  // (a torn or foreign value, a kind out of order, trailing bytes).
  static std::optional<ExtraKeys> parse(std::string_view bytes);

  bool operator==(const ExtraKeys&) const = default;
};

// Hash of one full block. `extra` is ExtraKeys::serialize() (computed once per
// request, not once per block). The parent of the first block is kRootHash.
using BlockHashFn = uint64_t (*)(uint64_t parent, std::span<const int32_t> tokens, std::string_view extra);

inline constexpr uint64_t kRootHash = 0;

uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens, std::string_view extra);

}  // namespace agentkv
