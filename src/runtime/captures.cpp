// Captures (captures.h).
#include "runtime/captures.h"

#include <algorithm>

namespace agentkv {

void Captures::mark(int32_t n_prompt, TokenRow* row) const {
  if (row->slot < 0) return;
  const int32_t end = row->layer_end == kAllLayers ? n_layers_ : row->layer_end;
  if (hidden_ != nullptr && layer_ > 0 && row->layer_begin == 0 && end > layer_) row->capture_layer = layer_;
  // Generated tokens receive influence from later decode steps.
  if (row->pos >= n_prompt) row->influence = true;
}

void Captures::copy(int64_t src, uint32_t src_gen, int64_t dst) const {
  if (hidden_ != nullptr) hidden_->copy(src, src_gen, dst, kv_->slot_generation(dst));
  if (influence_ != nullptr) influence_->copy(src, src_gen, dst, kv_->slot_generation(dst));
}

float Captures::influence(int64_t slot) const {
  if (influence_ == nullptr) return 0.0f;
  const std::span<const float> inf = influence_->read(slot, kv_->slot_generation(slot));
  return inf.empty() ? 0.0f : inf[0];
}

std::span<const float> Captures::hidden_at(int64_t slot) const {
  return hidden_ != nullptr ? hidden_->read(slot, kv_->slot_generation(slot)) : std::span<const float>();
}

void Captures::add_influence(const Step& step, const StepOutput& so, size_t q, int32_t n_prompt) const {
  if (influence_ == nullptr || q >= so.influence.size()) return;
  const std::vector<float>& acc = so.influence[q];
  if (acc.empty()) return;
  const StepSeq& sq = step.seqs[q];
  int32_t last = -1;  // the latest query position: keys before it were generated earlier
  for (int32_t r = sq.row_begin; r < sq.row_end; ++r) {
    if (step.rows[r].influence) last = std::max(last, step.rows[r].pos);
  }
  for (int32_t j = n_prompt; j < last && j < static_cast<int32_t>(acc.size()); ++j) {
    const int64_t slot = kv_slot(sq.blocks, j, bs_);
    const uint32_t gen = kv_->slot_generation(slot);
    const std::span<const float> cur = influence_->read(slot, gen);
    const float base = cur.empty() ? 0.0f : cur[0];
    influence_->write(slot, gen)[0] = base + acc[j];
  }
}

}  // namespace agentkv
