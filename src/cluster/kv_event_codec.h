// KV cache events in vLLM's wire format (vllm/distributed/kv_events.py,
// vLLM 0.33.0): a KVEventBatch is the msgpack array [ts, events,
// data_parallel_rank]; each event is a msgpack map tagged by its class name
// under "type" (msgspec's tag=True), with every field that has no default
// (None as nil) and extra_keys.
#pragma once

#include <cstdint>
#include <string>

#include "agentkv/kv_events.h"

namespace agentkv::cluster {

std::string encode_kv_event_batch(const KvEventBatch& batch, int32_t data_parallel_rank);

}  // namespace agentkv::cluster
