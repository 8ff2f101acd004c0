#include "kv/kv_storage.h"

#include <limits>
#include <new>

namespace agentkv {

Result<KvStorage> KvStorage::create(const KvGeometry& g, int64_t n_blocks) {
  if (g.n_layers <= 0 || g.kv_heads <= 0 || g.head_dim <= 0 || g.block_size <= 0 || n_blocks <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "KV geometry and block count must be positive");
  }
  if (n_blocks > std::numeric_limits<int64_t>::max() / g.block_bytes()) {
    return make_error(ErrorCode::kOutOfRange, "KV cache of ", n_blocks, " blocks is too large");
  }
  KvStorage s;
  s.g_ = g;
  s.n_blocks_ = n_blocks;
  if (!s.data_.allocate(static_cast<size_t>(n_blocks * g.block_bytes()))) {
    return make_error(ErrorCode::kResourceExhausted, "cannot allocate ", n_blocks * g.block_bytes() / (1 << 20),
                      " MiB for the KV cache; lower --kv-cache-mb or --ctx-size");
  }
  return s;
}

KvLayerView KvStorage::layer_view(int32_t layer) {
  KvLayerView v;
  const int64_t per_kv = int64_t{g_.block_size} * g_.row_bytes();
  uint8_t* k = data_.data() + int64_t{layer} * 2 * per_kv;
  v.k = k;
  v.v = k + per_kv;
  v.block_stride = g_.block_elems();
  v.block_size = g_.block_size;
  v.kv_heads = g_.kv_heads;
  v.head_dim = g_.head_dim;
  v.dtype = g_.dtype;
  return v;
}

uint8_t* KvStorage::k_at(int32_t layer, int32_t block, int32_t offset) {
  KvLayerView v = layer_view(layer);
  return static_cast<uint8_t*>(v.k) + block * g_.block_bytes() + int64_t{offset} * g_.row_bytes();
}

uint8_t* KvStorage::v_at(int32_t layer, int32_t block, int32_t offset) {
  KvLayerView v = layer_view(layer);
  return static_cast<uint8_t*>(v.v) + block * g_.block_bytes() + int64_t{offset} * g_.row_bytes();
}

void KvStorage::read_k(int32_t layer, int32_t block, int32_t offset, float* dst) {
  kv_row_to_f32(g_.dtype, k_at(layer, block, offset), dst, g_.kv_dim());
}

void KvStorage::read_v(int32_t layer, int32_t block, int32_t offset, float* dst) {
  kv_row_to_f32(g_.dtype, v_at(layer, block, offset), dst, g_.kv_dim());
}

}  // namespace agentkv
