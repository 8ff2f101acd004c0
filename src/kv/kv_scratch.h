// Transient rows of floats kept in blocks of the KV pool, so that they count
// against the KV memory budget like the K/V they stand beside (docs/design.md §2,
// KV components). A holder (a request) reserves room for n rows of `width`
// floats; the pool lends it whole blocks under a reserved id, evicting cached
// blocks as for any allocation, and takes them back at release. The blocks'
// bytes are used raw: nothing indexes them, so no K/V is ever read from them.
//
// Used for a whole-prompt selection's hidden states (the serving engine's
// deferred chunks): d_model floats per prompt position.
#pragma once
#include <cstdint>

#include "kv/kv_manager.h"
#include "kv/kv_storage.h"

namespace agentkv {

class KvScratch {
 public:
  KvScratch(KvManager* kv, KvStorage* storage, int32_t width);

  // Room for rows [0, n) of the holder; false, holding nothing, when the
  // pool cannot lend the blocks (or n is not positive). A holder reserves
  // once until it releases.
  bool reserve(RequestId holder, int64_t n);
  bool holds(RequestId holder) const;
  int64_t rows_per_block() const { return rows_per_block_; }
  // Row i of a held reservation (i < the n reserved).
  void put(RequestId holder, int64_t i, const float* src);
  void get(RequestId holder, int64_t i, float* dst) const;
  // Gives the blocks back (nothing if it holds none).
  void release(RequestId holder);

  // The pool id a holder's blocks are kept under: request ids never reach it.
  static RequestId key(RequestId holder) { return holder | (RequestId{1} << 63); }

 private:
  uint8_t* row_at(RequestId holder, int64_t i) const;

  KvManager* kv_;
  KvStorage* storage_;
  int32_t width_;
  int64_t rows_per_block_;
};

}  // namespace agentkv
