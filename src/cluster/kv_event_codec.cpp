#include "cluster/kv_event_codec.h"

#include <msgpack.hpp>

namespace agentkv::cluster {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void pack_str(Packer& pk, const std::string& s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void pack_hashes(Packer& pk, const std::vector<uint64_t>& hashes) {
  pk.pack_array(static_cast<uint32_t>(hashes.size()));
  for (uint64_t h : hashes) pk.pack_uint64(h);
}

void pack_event(Packer& pk, const KvBlockStored& s) {
  pk.pack_map(9);
  pack_str(pk, "type");
  pack_str(pk, "BlockStored");
  pack_str(pk, "block_hashes");
  pack_hashes(pk, s.block_hashes);
  pack_str(pk, "parent_block_hash");
  if (s.parent_block_hash) {
    pk.pack_uint64(*s.parent_block_hash);
  } else {
    pk.pack_nil();
  }
  pack_str(pk, "token_ids");
  pk.pack_array(static_cast<uint32_t>(s.token_ids.size()));
  for (int32_t t : s.token_ids) pk.pack_int32(t);
  pack_str(pk, "block_size");
  pk.pack_int32(s.block_size);
  pack_str(pk, "lora_id");  // deprecated in vLLM; lora_name keys the block
  pk.pack_nil();
  pack_str(pk, "medium");
  pack_str(pk, s.medium);
  pack_str(pk, "lora_name");
  if (s.lora_name) {
    pack_str(pk, *s.lora_name);
  } else {
    pk.pack_nil();
  }
  pack_str(pk, "extra_keys");
  pk.pack_array(static_cast<uint32_t>(s.extra_keys.size()));
  for (const std::vector<std::string>& k : s.extra_keys) {
    if (k.empty()) {
      pk.pack_nil();
      continue;
    }
    pk.pack_array(static_cast<uint32_t>(k.size()));
    for (const std::string& v : k) pack_str(pk, v);
  }
}

void pack_event(Packer& pk, const KvBlockRemoved& r) {
  pk.pack_map(3);
  pack_str(pk, "type");
  pack_str(pk, "BlockRemoved");
  pack_str(pk, "block_hashes");
  pack_hashes(pk, r.block_hashes);
  pack_str(pk, "medium");
  pack_str(pk, r.medium);
}

void pack_event(Packer& pk, const KvAllBlocksCleared&) {
  pk.pack_map(1);
  pack_str(pk, "type");
  pack_str(pk, "AllBlocksCleared");
}

}  // namespace

std::string encode_kv_event_batch(const KvEventBatch& batch, int32_t data_parallel_rank) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(3);
  pk.pack_double(batch.ts);
  pk.pack_array(static_cast<uint32_t>(batch.events.size()));
  for (const KvEvent& e : batch.events) std::visit([&](const auto& ev) { pack_event(pk, ev); }, e);
  pk.pack_int32(data_parallel_rank);
  return std::string(buf.data(), buf.size());
}

}  // namespace agentkv::cluster
