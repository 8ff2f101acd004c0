// A shared tier of cached KV blocks outside the process (Redis:
// src/cluster/redis_kv_tier.h), so that a replica loads what another one
// computed. The engine (ServingOptions::kv_remote) writes each exact block it
// registers and, for a prompt whose prefix it lacks, asks for the blocks
// before scheduling the request; values are kv/remote_block.h's. Neither call
// blocks the engine; a tier that is down or slow only means recompute.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace agentkv {

class KvRemoteTier {
 public:
  virtual ~KvRemoteTier() = default;
  // Queues a write; a full queue drops it (counted by the tier).
  virtual void put(std::string key, std::string value) = 0;
  // Queues a write of a small value that names a block put() wrote (a
  // segment ref, kv/remote_block.h): written like one, counted apart.
  virtual void put_ref(std::string key, std::string value) = 0;
  // Asks for the values of `keys`; the answer comes from poll() under `ticket`.
  virtual void get(uint64_t ticket, std::vector<std::string> keys) = 0;
  struct Answer {
    uint64_t ticket = 0;
    std::vector<std::optional<std::string>> values;  // per key; all nullopt when the tier failed
  };
  // The answers ready now.
  virtual std::vector<Answer> poll() = 0;
  // Called (from the tier's thread) when an answer is ready.
  virtual void set_notify(std::function<void()> fn) = 0;
};

}  // namespace agentkv
