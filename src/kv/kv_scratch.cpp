#include "kv/kv_scratch.h"

#include <cstring>

namespace agentkv {

KvScratch::KvScratch(KvManager* kv, KvStorage* storage, int32_t width)
    : kv_(kv), storage_(storage), width_(width),
      rows_per_block_(storage->geometry().block_bytes() / (int64_t{width} * int64_t{sizeof(float)})) {}

bool KvScratch::reserve(RequestId holder, int64_t n) {
  if (n <= 0 || rows_per_block_ <= 0 || holds(holder)) return false;
  const int64_t blocks = (n + rows_per_block_ - 1) / rows_per_block_;
  const int64_t slots = blocks * kv_->block_size();
  if (slots > kv_->pool().n_blocks() * int64_t{kv_->block_size()}) return false;
  if (!kv_->allocate_slots(key(holder), static_cast<int32_t>(slots)).is_ok()) {
    kv_->free(key(holder));
    return false;
  }
  return true;
}

bool KvScratch::holds(RequestId holder) const { return kv_->has_request(key(holder)); }

uint8_t* KvScratch::row_at(RequestId holder, int64_t i) const {
  const int32_t block = kv_->block_table(key(holder))[static_cast<size_t>(i / rows_per_block_)];
  // A block's bytes are contiguous (KvStorage's layout); its start is layer 0's K of offset 0.
  return storage_->k_at(0, block, 0) + (i % rows_per_block_) * width_ * int64_t{sizeof(float)};
}

void KvScratch::put(RequestId holder, int64_t i, const float* src) {
  std::memcpy(row_at(holder, i), src, sizeof(float) * static_cast<size_t>(width_));
}

void KvScratch::get(RequestId holder, int64_t i, float* dst) const {
  std::memcpy(dst, row_at(holder, i), sizeof(float) * static_cast<size_t>(width_));
}

void KvScratch::release(RequestId holder) { kv_->free(key(holder)); }

}  // namespace agentkv
