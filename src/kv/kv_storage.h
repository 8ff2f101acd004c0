// Physical KV memory: a fixed number of blocks, each holding post-RoPE K and V
// of block_size tokens for every layer. Pure storage; which block belongs to
// whom is the block pool's business.
//
// Block layout (floats): [n_layers][2 (K, V)][block_size][kv_dim]
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "util/status.h"

namespace agentkv {

struct KvGeometry {
  int32_t n_layers = 0;
  int32_t kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;

  int64_t kv_dim() const { return int64_t{kv_heads} * head_dim; }
  int64_t block_floats() const { return int64_t{n_layers} * 2 * block_size * kv_dim(); }
  int64_t block_bytes() const { return block_floats() * static_cast<int64_t>(sizeof(float)); }
};

class KvStorage {
 public:
  // Allocates n_blocks blocks; error if the size overflows or memory is refused.
  static Result<KvStorage> create(const KvGeometry& g, int64_t n_blocks);

  const KvGeometry& geometry() const { return g_; }
  int64_t n_blocks() const { return n_blocks_; }
  KvLayerView layer_view(int32_t layer);

  // Direct access to one token's K or V at a layer (tests, copies).
  float* k_at(int32_t layer, int32_t block, int32_t offset);
  float* v_at(int32_t layer, int32_t block, int32_t offset);

 private:
  KvGeometry g_;
  int64_t n_blocks_ = 0;
  std::vector<float> data_;
};

}  // namespace agentkv
