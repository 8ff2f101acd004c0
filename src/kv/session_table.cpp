#include "kv/session_table.h"

#include <algorithm>
#include <limits>

namespace agentkv {

void SessionTable::keep(const std::string& key, const std::vector<BlockRef>& blocks, double now, double expires) {
  Session& s = sessions_[key];
  s.last_used = now;
  s.expires = std::max(s.expires, expires);
  next_expiry_ = std::min(next_expiry_ == 0 ? s.expires : next_expiry_, s.expires);
  for (const BlockRef& b : blocks) {
    if (!pool_.is_current(b) || !s.ids.insert(b.id).second) continue;
    pool_.protect(b.id);
    s.blocks.push_back(b);
  }
  enforce_share(key);
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
  for (const BlockRef& b : s.blocks) {
    if (pool_.is_current(b)) pool_.unprotect(b.id);  // else evicted and reused: nothing to release
  }
  s.blocks.clear();
  s.ids.clear();
}

void SessionTable::enforce_share(const std::string& keep_key) {
  const auto cap = static_cast<int32_t>(share_ * pool_.n_blocks());
  while (pool_.n_protected() > cap) {
    // The least recently used session that still protects something; the
    // one just renewed goes last.
    Session* oldest = nullptr;
    for (auto& [k, s] : sessions_) {
      if (s.blocks.empty() || k == keep_key) continue;
      if (oldest == nullptr || s.last_used < oldest->last_used) oldest = &s;
    }
    if (oldest == nullptr) oldest = &sessions_[keep_key];
    if (oldest->blocks.empty()) return;
    if (oldest == &sessions_[keep_key]) {
      // The renewed session alone is over the share: keep its head (a
      // prefix hit needs the chain from the first block), drop its tail.
      while (pool_.n_protected() > cap && !oldest->blocks.empty()) {
        const BlockRef b = oldest->blocks.back();
        oldest->blocks.pop_back();
        oldest->ids.erase(b.id);
        if (pool_.is_current(b)) pool_.unprotect(b.id);
      }
      return;
    }
    release(*oldest);
  }
}

}  // namespace agentkv
