// Physical KV memory: a fixed number of blocks, each holding post-RoPE K and V
// of block_size tokens for every layer. Pure storage; which block belongs to
// whom is the block pool's business.
//
// Block layout (elements of dtype): [n_layers][2 (K, V)][block_size][kv_dim]
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "util/status.h"
#include "util/zeroed_array.h"

namespace agentkv {

struct KvGeometry {
  int32_t n_layers = 0;
  int32_t kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;
  KvDType dtype = KvDType::kF32;  // the engine's default is f16 (ServingOptions::kv_dtype)

  int64_t kv_dim() const { return int64_t{kv_heads} * head_dim; }
  int64_t block_elems() const { return int64_t{n_layers} * 2 * block_size * kv_dim(); }
  int64_t block_bytes() const { return block_elems() * kv_dtype_bytes(dtype); }
  // Bytes of one token's K (or V) at one layer.
  int64_t row_bytes() const { return kv_dim() * kv_dtype_bytes(dtype); }
  // Bytes of K and V per token over all layers.
  int64_t token_bytes() const { return int64_t{n_layers} * 2 * row_bytes(); }
};

class KvStorage {
 public:
  // Allocates n_blocks blocks; error if the size overflows or memory is refused.
  static Result<KvStorage> create(const KvGeometry& g, int64_t n_blocks);

  const KvGeometry& geometry() const { return g_; }
  int64_t n_blocks() const { return n_blocks_; }
  KvLayerView layer_view(int32_t layer);

  // One token's K or V at a layer, geometry().row_bytes() bytes of dtype
  // (copies between slots).
  // All of one block's bytes (every layer's K and V), geometry().block_bytes() long.
  uint8_t* block_data(int32_t block) { return data_.data() + int64_t{block} * g_.block_bytes(); }
  const uint8_t* block_data(int32_t block) const { return data_.data() + int64_t{block} * g_.block_bytes(); }
  uint8_t* k_at(int32_t layer, int32_t block, int32_t offset);
  uint8_t* v_at(int32_t layer, int32_t block, int32_t offset);
  // The same row widened to f32: dst[kv_dim].
  void read_k(int32_t layer, int32_t block, int32_t offset, float* dst);
  void read_v(int32_t layer, int32_t block, int32_t offset, float* dst);

 private:
  KvGeometry g_;
  int64_t n_blocks_ = 0;
  ZeroedArray<uint8_t> data_;
};

}  // namespace agentkv
