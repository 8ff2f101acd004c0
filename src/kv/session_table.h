// Agent sessions (docs/usage.md, "Agent sessions"): an agent that pauses for
// a tool call keeps its cached trajectory. A session protects the blocks its
// requests wrote or read, whichever adapter ran them, so a team sharing one
// trajectory keeps the one copy. Protected blocks are evicted only after
// every unprotected one (BlockPool's second LRU); at most `share` of the
// pool is protected, and past it the least recently used sessions lose their
// protection first. An expired or ended session's blocks become ordinary
// cached blocks. Pure bookkeeping over a BlockPool: no tensors, no clocks
// (the caller passes `now`).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kv/block_pool.h"

namespace agentkv {

class SessionTable {
 public:
  explicit SessionTable(BlockPool& pool) : pool_(pool) {}

  void set_share(double share) { share_ = share; }
  double share() const { return share_; }

  // A request of session `key` finished holding `blocks` (its canonical
  // blocks, position order): protect them until `expires` (seconds on the
  // caller's clock) and renew the session.
  void keep(const std::string& key, const std::vector<BlockRef>& blocks, double now, double expires);
  // DELETE: protection released now. False for an unknown key.
  bool end(const std::string& key);
  // Ends the sessions whose time is up; cheap when none is.
  void expire(double now);

  int32_t n_live() const { return static_cast<int32_t>(sessions_.size()); }
  bool contains(const std::string& key) const { return sessions_.count(key) != 0; }

 private:
  struct Session {
    std::vector<BlockRef> blocks;      // protected by this session
    std::unordered_set<int32_t> ids;   // their ids, to add each once
    double expires = 0;
    double last_used = 0;
  };
  void release(Session& s);
  // Past the share: the least recently used sessions lose their protection.
  void enforce_share(const std::string& keep_key);

  BlockPool& pool_;
  double share_ = 0.5;
  double next_expiry_ = 0;  // no session expires before this
  std::unordered_map<std::string, Session> sessions_;
};

}  // namespace agentkv
