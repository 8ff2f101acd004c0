// A KV component (docs/design.md §2): a side store with the block geometry that
// holds `width` floats per token slot next to a block's K/V, such as the
// hidden state entering one layer (RelayCaching's h^(L_start)) or a running
// per-token statistic (its influence score). It is indexed by KV slot
// (block_id * block_size + offset), so it lives and dies with its blocks:
// each written slot is stamped with its block's generation, and a slot
// whose block was handed out again since reads as absent.
//
// The engine sizes the KV pool with bytes_per_block() included, so
// components count against the KV memory budget.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "util/status.h"
#include "util/zeroed_array.h"

namespace agentkv {

class KvComponent {
 public:
  // kInvalidArgument for a non-positive size; kResourceExhausted when the
  // memory cannot be had.
  static Result<KvComponent> create(int64_t n_blocks, int32_t block_size, int32_t width);

  int32_t width() const { return width_; }
  int64_t bytes_per_block() const { return int64_t{block_size_} * (width_ * int64_t{sizeof(float)} + sizeof(uint32_t)); }

  // The slot's row, for writing: stamps it with `generation` (the block's
  // life, BlockPool::ref_of(block).generation).
  std::span<float> write(int64_t slot, uint32_t generation);
  // The slot's row when it was written in block life `generation`; empty otherwise.
  std::span<const float> read(int64_t slot, uint32_t generation) const;
  // Copies src's row (written in src_generation) to dst (stamped
  // dst_generation). False, and dst untouched, when src has none.
  bool copy(int64_t src, uint32_t src_generation, int64_t dst, uint32_t dst_generation);

 private:
  KvComponent() = default;
  int32_t block_size_ = 0;
  int32_t width_ = 0;
  ZeroedArray<float> data_;      // [n_slots, width]
  ZeroedArray<uint32_t> stamp_;  // [n_slots]: generation + 1 of the write, 0: never written
};

}  // namespace agentkv
