// A full KV block as a remote tier (Redis) keeps it, so that a replica can
// load what another one computed. The value carries the block's whole key
// (model tag, hash, parent hash, token ids, extra keys) and a checksum of its
// K/V bytes: a torn, foreign or stale value is a miss, never wrong KV.
//
// Value: "AKVB" | u32 version | u64 model_tag | u64 hash | u64 parent_hash |
// u32 n_tokens | i32 tokens[n] | u32 extra_len | extra | u64 payload_len |
// u64 checksum(payload) | payload; integers little-endian.
//
// A segment ref lets a replica find a block by its tokens alone, at any
// offset of its own prompt (segment reuse, kv/segment_index.h): its key is the
// block's segment hash H(kRootHash, tokens, extra) in the same namespace, and
// its value names the block (its prefix hash, parent hash and the position it
// was computed at): "AKVS" | u32 version | u64 model_tag | u64 segment_hash |
// u64 hash | u64 parent_hash | i32 pos. The block's own value then verifies
// tokens and keys as for any block.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kv/block_hash.h"

namespace agentkv {

struct RemoteBlockKey {
  uint64_t model_tag = 0;  // the model file, KV geometry and dtype (remote_model_tag)
  uint64_t hash = 0;
  uint64_t parent_hash = kRootHash;
  std::span<const int32_t> tokens;
  std::string_view extra;  // ExtraKeys::serialize()
};

// Identifies what K/V bytes mean: the same model file, layers, heads, block
// size and element type.
uint64_t remote_model_tag(std::string_view model_id, int32_t n_layers, int32_t kv_heads, int32_t head_dim,
                          int32_t block_size, std::string_view dtype);

// The key the remote tier stores the block under: the model tag, the
// tenant's namespace (tenant and cache_salt) and the block hash, so each
// tenant's blocks are apart even in one Redis.
std::string remote_block_name(uint64_t model_tag, const ExtraKeys& keys, uint64_t hash);

// The key of the segment ref for segment hash `segment_hash`.
std::string remote_segment_name(uint64_t model_tag, const ExtraKeys& keys, uint64_t segment_hash);

struct RemoteSegmentRef {
  uint64_t hash = 0;  // the block's prefix hash: remote_block_name(.., hash) holds it
  uint64_t parent_hash = kRootHash;
  int32_t pos = 0;  // sequence position of its first token where it was computed
};

std::string encode_remote_segment_ref(uint64_t model_tag, uint64_t segment_hash, const RemoteSegmentRef& ref);
// The ref when `value` is one for exactly this model tag and segment hash.
std::optional<RemoteSegmentRef> decode_remote_segment_ref(std::string_view value, uint64_t model_tag,
                                                          uint64_t segment_hash);

std::string encode_remote_block(const RemoteBlockKey& key, std::span<const uint8_t> payload);

// The K/V bytes when `value` holds exactly `key`'s block, payload_bytes
// long, with a matching checksum; nullopt otherwise.
std::optional<std::span<const uint8_t>> decode_remote_block(std::string_view value, const RemoteBlockKey& key,
                                                            size_t payload_bytes);

}  // namespace agentkv
