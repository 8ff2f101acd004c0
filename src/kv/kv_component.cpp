#include "kv/kv_component.h"

#include <algorithm>
#include <new>

namespace agentkv {

Result<KvComponent> KvComponent::create(int64_t n_blocks, int32_t block_size, int32_t width) {
  if (n_blocks < 1 || block_size < 1 || width < 1) {
    return make_error(ErrorCode::kInvalidArgument, "a KV component needs blocks, a block size and a width");
  }
  KvComponent c;
  c.block_size_ = block_size;
  c.width_ = width;
  const int64_t n_slots = n_blocks * block_size;
  if (!c.data_.allocate(static_cast<size_t>(n_slots * width)) || !c.stamp_.allocate(static_cast<size_t>(n_slots))) {
    return make_error(ErrorCode::kResourceExhausted, "cannot allocate a KV component of ", n_slots, " x ", width,
                      " floats");
  }
  return c;
}

std::span<float> KvComponent::write(int64_t slot, uint32_t generation) {
  stamp_[static_cast<size_t>(slot)] = generation + 1;
  return {data_.data() + slot * width_, static_cast<size_t>(width_)};
}

std::span<const float> KvComponent::read(int64_t slot, uint32_t generation) const {
  if (slot < 0 || static_cast<size_t>(slot) >= stamp_.size() || stamp_[static_cast<size_t>(slot)] != generation + 1) {
    return {};
  }
  return {data_.data() + slot * width_, static_cast<size_t>(width_)};
}

bool KvComponent::copy(int64_t src, uint32_t src_generation, int64_t dst, uint32_t dst_generation) {
  const std::span<const float> from = read(src, src_generation);
  if (from.empty()) return false;
  std::span<float> to = write(dst, dst_generation);
  std::copy(from.begin(), from.end(), to.begin());
  return true;
}

}  // namespace agentkv
