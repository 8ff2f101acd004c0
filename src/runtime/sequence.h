// One sequence's KV state for single-sequence use (CLI generate, logits,
// bench-forward): its block table and how many positions are filled. Appends
// tokens as Steps of at most `ubatch` rows through the runner.
#pragma once

#include <span>
#include <vector>

#include "kv/block_pool.h"
#include "runtime/runner.h"

namespace agentkv {

class SequenceState {
 public:
  SequenceState(Runner* runner, BlockPool* pool, int32_t block_size, int32_t ubatch);
  ~SequenceState();
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;

  // Runs tokens at positions n_past.. and fills `last_logits` with the final
  // token's logits. Error (and no change of n_past) if the KV pool is full.
  Status append(std::span<const int32_t> tokens, std::vector<float>* last_logits);
  void reset();

  int32_t n_past() const { return n_past_; }

 private:
  Runner* runner_;
  BlockPool* pool_;
  int32_t block_size_;
  int32_t ubatch_;
  int32_t n_past_ = 0;
  std::vector<int32_t> blocks_;
};

}  // namespace agentkv
