// Agent sessions (docs/usage.md, "Agent sessions"): an agent that pauses for
// a tool call keeps its cached trajectory. A session protects the blocks its
// requests wrote or read, whichever adapter ran them, so a team sharing one
// trajectory keeps the one copy. Protected blocks are evicted only after
// every unprotected one (BlockPool's second LRU). At most `share` of the
// pool is protected (the rest is for running requests), granted in order:
// once it is full, blocks not yet protected stay ordinary until an earlier
// session ends or expires, while the sessions that hold protection keep it. (Dropping the least recently used session instead would
// unprotect the agent paused longest, the one likely to come back first:
// LRU's worst case on cyclic agent loads.) An expired or ended session's
// blocks become ordinary cached blocks. Pure bookkeeping over a BlockPool:
// no tensors, no clocks (the caller passes the times).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"

namespace agentkv {

// A session's key in the table: its id scoped to the tenant, length-prefixed
// so that no (tenant, id) pair aliases another.
inline std::string session_key(const std::string& tenant, const std::string& id) {
  return std::to_string(tenant.size()) + ':' + tenant + id;
}

class SessionTable {
 public:
  explicit SessionTable(BlockPool& pool) : pool_(pool) {}

  void set_share(double share) { share_ = share; }
  double share() const { return share_; }

  // A request of session `key` finished holding `blocks` (its canonical
  // blocks, position order): protect them, as far as the share allows,
  // until `expires` (seconds on the caller's clock), and renew the session.
  void keep(const std::string& key, const std::vector<BlockRef>& blocks, double expires);
  // DELETE: protection released now. False for an unknown key.
  bool end(const std::string& key);
  // Ends the sessions whose time is up; cheap when none is.
  void expire(double now);

  int32_t n_live() const { return static_cast<int32_t>(sessions_.size()); }
  bool contains(const std::string& key) const { return sessions_.count(key) != 0; }

 private:
  struct Session {
    // The blocks this session protects: id -> the generation (life) it
    // protected. An evicted block's id comes back as a new life, protected
    // again; the old life's protection went with the eviction.
    std::unordered_map<int32_t, uint32_t> lives;
    double expires = 0;
  };
  void release(Session& s);

  BlockPool& pool_;
  double share_ = 0.5;
  double next_expiry_ = 0;  // no session expires before this
  std::unordered_map<std::string, Session> sessions_;
};

}  // namespace agentkv
