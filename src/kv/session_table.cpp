#include "kv/session_table.h"

#include <algorithm>
#include <limits>

namespace agentkv {

void SessionTable::keep(const std::string& key, const std::vector<BlockRef>& blocks, double expires) {
  Session& s = sessions_[key];
  s.expires = std::max(s.expires, expires);
  next_expiry_ = std::min(next_expiry_ == 0 ? s.expires : next_expiry_, s.expires);
  const auto cap = static_cast<int32_t>(share_ * pool_.n_blocks());
  for (const BlockRef& b : blocks) {
    if (!pool_.is_current(b)) break;  // the chain is broken here: later blocks cannot be hit
    auto it = s.lives.find(b.id);
    if (it != s.lives.end() && it->second == b.generation) continue;
    // Past the share a block no session protects yet stays ordinary, and so
    // do the ones after it (a prefix hit needs the chain from the first).
    if (pool_.meta(b.id).protect == 0 && pool_.n_protected() >= cap) break;
    s.lives[b.id] = b.generation;
    pool_.protect(b.id);
  }
}

bool SessionTable::end(const std::string& key) {
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return false;
  release(it->second);
  sessions_.erase(it);
  return true;
}

void SessionTable::expire(double now) {
  if (sessions_.empty() || now < next_expiry_) return;
  double next = std::numeric_limits<double>::max();
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second.expires <= now) {
      release(it->second);
      it = sessions_.erase(it);
    } else {
      next = std::min(next, it->second.expires);
      ++it;
    }
  }
  next_expiry_ = sessions_.empty() ? 0 : next;
}

void SessionTable::release(Session& s) {
  for (const auto& [id, generation] : s.lives) {
    if (pool_.is_current({id, generation})) pool_.unprotect(id);  // else evicted and reused: nothing to release
  }
  s.lives.clear();
}

}  // namespace agentkv
