// The LR cache's physical memory (LRAgent §3, SCHEMES.md §1.2): per token and
// layer one row of `width` floats holding X·A^T of an adapter's v_proj LoRA
// (its rank r <= width values, before scaling; the rest unused). Blocks of
// block_size tokens like the K/V, but a pool of their own: the LR cache has
// its own lineage (the adapter, or its shared-A group) and a KvManager of
// its own over these block ids. Pure storage, as KvStorage.
//
// Block layout (floats): [n_layers][block_size][width]
#pragma once

#include <cstdint>
#include <vector>

#include "util/status.h"
#include "util/zeroed_array.h"

namespace agentkv {

struct LrGeometry {
  int32_t n_layers = 0;
  int32_t block_size = 16;
  int32_t width = 0;  // the largest v_proj rank it holds

  int64_t block_floats() const { return int64_t{n_layers} * block_size * width; }
  int64_t block_bytes() const { return block_floats() * static_cast<int64_t>(sizeof(float)); }
};

class LrStorage {
 public:
  // kInvalidArgument for a non-positive size; kResourceExhausted when the
  // memory cannot be had.
  static Result<LrStorage> create(const LrGeometry& g, int64_t n_blocks);

  const LrGeometry& geometry() const { return g_; }
  int64_t n_blocks() const { return n_blocks_; }
  // Layer `layer`'s rows: token t of block b at layer_base(layer) + b * block_stride() + t * width.
  float* layer_base(int32_t layer) { return data_.data() + int64_t{layer} * g_.block_size * g_.width; }
  int64_t block_stride() const { return g_.block_floats(); }
  float* row(int32_t layer, int64_t slot) {
    return layer_base(layer) + (slot / g_.block_size) * block_stride() + (slot % g_.block_size) * g_.width;
  }

 private:
  LrGeometry g_;
  int64_t n_blocks_ = 0;
  ZeroedArray<float> data_;
};

}  // namespace agentkv
