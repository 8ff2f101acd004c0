// The LR cache's physical memory (LRAgent §3, docs/scheme_algorithms.md §1.2): per token and
// layer one row of `width` values holding X·A^T of an adapter's v_proj LoRA
// (its rank r <= width values, before scaling; the rest unused), in the KV
// cache's element type (--kv-dtype): the low-rank part of V is stored as V is. Blocks of
// block_size tokens like the K/V, but a pool of their own: the LR cache has
// its own lineage (the adapter, or its shared-A group) and a KvManager of
// its own over these block ids. Pure storage, as KvStorage.
//
// Block layout (elements): [n_layers][block_size][width]
#pragma once

#include <cstdint>
#include <vector>

#include "backend/kv_dtype.h"
#include "util/status.h"
#include "util/zeroed_array.h"

namespace agentkv {

struct LrGeometry {
  int32_t n_layers = 0;
  int32_t block_size = 16;
  int32_t width = 0;  // the largest v_proj rank it holds
  KvDType dtype = KvDType::kF32;

  int64_t block_elems() const { return int64_t{n_layers} * block_size * width; }
  int64_t block_bytes() const { return block_elems() * kv_dtype_bytes(dtype); }
};

class LrStorage {
 public:
  // kInvalidArgument for a non-positive size; kResourceExhausted when the
  // memory cannot be had.
  static Result<LrStorage> create(const LrGeometry& g, int64_t n_blocks);

  const LrGeometry& geometry() const { return g_; }
  int64_t n_blocks() const { return n_blocks_; }
  // Layer `layer`'s rows: token t of block b at element b * block_stride() + t * width from layer_base(layer).
  uint8_t* layer_base(int32_t layer) { return data_.data() + int64_t{layer} * g_.block_size * g_.width * elem_bytes(); }
  int64_t block_stride() const { return g_.block_elems(); }  // elements
  uint8_t* row(int32_t layer, int64_t slot) {
    return layer_base(layer) + ((slot / g_.block_size) * block_stride() + (slot % g_.block_size) * g_.width) * elem_bytes();
  }
  // Stores v[0..width) in the row, rounded to the element type (to nearest
  // even, the bits kv_write gives K and V).
  void write_row(int32_t layer, int64_t slot, const float* v);

 private:
  LrGeometry g_;
  int64_t n_blocks_ = 0;
  int64_t elem_bytes() const { return kv_dtype_bytes(g_.dtype); }
  ZeroedArray<uint8_t> data_;
};

}  // namespace agentkv
