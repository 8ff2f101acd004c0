#include "runtime/sequence.h"

#include <algorithm>

namespace agentkv {

SequenceState::SequenceState(Runner* runner, BlockPool* pool, int32_t block_size, int32_t ubatch)
    : runner_(runner), pool_(pool), block_size_(block_size), ubatch_(std::max(1, ubatch)) {}

SequenceState::~SequenceState() { reset(); }

void SequenceState::reset() {
  pool_->release(blocks_);
  blocks_.clear();
  n_past_ = 0;
}

Status SequenceState::append(std::span<const int32_t> tokens, std::vector<float>* last_logits) {
  if (tokens.empty()) return make_error(ErrorCode::kInvalidArgument, "no tokens to evaluate");
  const int64_t end = int64_t{n_past_} + static_cast<int64_t>(tokens.size());
  const int64_t need = (end + block_size_ - 1) / block_size_ - static_cast<int64_t>(blocks_.size());
  if (need > 0) {
    AKV_ASSIGN_OR_RETURN(auto fresh, pool_->allocate(static_cast<int32_t>(need)));
    blocks_.insert(blocks_.end(), fresh.begin(), fresh.end());
  }
  Step step;
  for (size_t begin = 0; begin < tokens.size(); begin += ubatch_) {
    const size_t n = std::min<size_t>(ubatch_, tokens.size() - begin);
    step.rows.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const int32_t pos = n_past_ + static_cast<int32_t>(i);
      step.rows[i] = TokenRow{tokens[begin + i], pos,
                              int64_t{blocks_[pos / block_size_]} * block_size_ + pos % block_size_,
                              begin + i == tokens.size() - 1};
    }
    step.seqs.assign(1, StepSeq{0, static_cast<int32_t>(n), blocks_});
    AKV_RETURN_IF_ERROR(runner_->execute(step, last_logits));
    n_past_ += static_cast<int32_t>(n);
  }
  return Status::ok();
}

}  // namespace agentkv
