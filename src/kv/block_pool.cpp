#include "kv/block_pool.h"

#include <cassert>
#include <utility>

namespace agentkv {

BlockPool::BlockPool(int32_t n_blocks) : meta_(n_blocks), index_(n_blocks) {
  free_.reserve(n_blocks);
  for (int32_t i = n_blocks - 1; i >= 0; --i) free_.push_back(i);
}

Result<std::vector<int32_t>> BlockPool::allocate(int32_t n) {
  if (n < 0 || n > n_available()) {
    return make_error(ErrorCode::kResourceExhausted, "KV cache exhausted: need ", n, " blocks, ",
                      n_available(), " free of ", n_blocks());
  }
  std::vector<int32_t> out;
  out.reserve(n);
  while (static_cast<int32_t>(out.size()) < n) {
    int32_t b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {
      b = lru_head_[0] != -1 ? lru_head_[0] : lru_head_[1];
      lru_remove(b);
      unindex(b);
    }
    BlockMeta& m = meta_[b];
    assert(m.ref == 0);
    if (m.protect > 0) {  // a new life: no session protects it any more
      m.protect = 0;
      --n_protected_;
    }
    m.ref = 1;
    ++m.generation;
    out.push_back(b);
  }
  return out;
}

void BlockPool::release(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    assert(b >= 0 && b < n_blocks() && meta_[b].ref > 0);
    if (--meta_[b].ref > 0) continue;
    if (index_.contains(b)) {
      lru_push_back(b);
    } else {
      free_.push_back(b);
    }
  }
}

void BlockPool::touch(int32_t block) {
  BlockMeta& m = meta_[block];
  if (m.protect > 0) ++protected_hits_;
  if (m.ref == 0) {
    assert(m.in_lru && "touch of a free block");
    lru_remove(block);
  }
  ++m.ref;
}

void BlockPool::refresh(int32_t block) {
  if (meta_[block].protect > 0) ++protected_hits_;
  if (meta_[block].ref != 0 || !meta_[block].in_lru) return;
  lru_remove(block);
  lru_push_back(block);
}

bool BlockPool::cache(int32_t block, BlockKey key, uint64_t parent_hash) {
  assert(meta_[block].ref > 0);
  if (!index_.insert(block, std::move(key))) return false;
  if (observer_ != nullptr) observer_->block_stored(block, *index_.key_of(block), parent_hash);
  return true;
}

void BlockPool::unindex(int32_t b) {
  if (observer_ != nullptr) {
    if (const BlockKey* k = index_.key_of(b)) observer_->block_removed(b, *k);
  }
  index_.erase(b);
}

void BlockPool::uncache(int32_t block) {
  unindex(block);
  if (meta_[block].protect > 0) {  // forgotten content: nothing left to protect
    meta_[block].protect = 0;
    --n_protected_;
  }
  if (meta_[block].in_lru) {
    lru_remove(block);
    free_.push_back(block);
  }
}

void BlockPool::protect(int32_t block) {
  BlockMeta& m = meta_[block];
  if (m.protect++ > 0) return;
  ++n_protected_;
  if (m.in_lru) {  // to the protected list
    lru_remove(block);
    lru_push_back(block);
  }
}

void BlockPool::unprotect(int32_t block) {
  BlockMeta& m = meta_[block];
  if (m.protect == 0 || --m.protect > 0) return;
  --n_protected_;
  if (m.in_lru) {  // an ordinary cached block again, the most recent one
    lru_remove(block);
    lru_push_back(block);
  }
}

std::vector<int32_t> BlockPool::lru_order() const {
  std::vector<int32_t> out;
  for (int list = 0; list < 2; ++list) {
    for (int32_t b = lru_head_[list]; b != -1; b = meta_[b].lru_next) out.push_back(b);
  }
  return out;
}

void BlockPool::lru_push_back(int32_t b) {
  BlockMeta& m = meta_[b];
  const int list = m.protect > 0 ? 1 : 0;
  m.lru_list = static_cast<int8_t>(list);
  m.lru_prev = lru_tail_[list];
  m.lru_next = -1;
  m.in_lru = true;
  if (lru_tail_[list] != -1) {
    meta_[lru_tail_[list]].lru_next = b;
  } else {
    lru_head_[list] = b;
  }
  lru_tail_[list] = b;
  ++n_cached_;
}

void BlockPool::lru_remove(int32_t b) {
  BlockMeta& m = meta_[b];
  assert(m.in_lru);
  const int list = m.lru_list;
  if (m.lru_prev != -1) {
    meta_[m.lru_prev].lru_next = m.lru_next;
  } else {
    lru_head_[list] = m.lru_next;
  }
  if (m.lru_next != -1) {
    meta_[m.lru_next].lru_prev = m.lru_prev;
  } else {
    lru_tail_[list] = m.lru_prev;
  }
  m.lru_prev = m.lru_next = -1;
  m.in_lru = false;
  --n_cached_;
}

}  // namespace agentkv
