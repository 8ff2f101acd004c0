#include "runtime/prompt_deferral.h"

#include <cassert>

namespace agentkv {

bool PromptDeferral::start(KvScratch* scratch, RequestId holder, int32_t begin, int32_t n_prompt) {
  if (started()) return true;
  // Room for every position from here to the prompt's end: the states at
  // the selection layer, and later those of the rows kept above it.
  if (!scratch->reserve(holder, n_prompt - begin)) {
    off_ = true;
    return false;
  }
  scratch_ = scratch;
  holder_ = holder;
  begin_ = begin;
  return true;
}

// put, get, split and drop act on a started deferral (the engine calls them
// only then).
void PromptDeferral::put(int32_t pos, const float* h) {
  assert(started() && pos >= begin_);
  scratch_->put(holder_, pos - begin_, h);
}

void PromptDeferral::get(int32_t pos, float* dst) const {
  assert(started() && pos >= begin_);
  scratch_->get(holder_, pos - begin_, dst);
}

bool PromptDeferral::split(Step* step, int32_t row_begin, int32_t last_hook, int32_t n_layers,
                           int64_t max_token_layers, int32_t n_prompt) {
  assert(started());
  const int32_t cap = last_hook + 1;
  auto end_of = [&](const TokenRow& row) { return row.layer_end == kAllLayers ? n_layers : row.layer_end; };
  int64_t cost = 0;
  for (size_t i = row_begin; i < step->rows.size(); ++i)
    cost += end_of(step->rows[i]) - step->rows[i].layer_begin;
  if (cap >= n_layers || cost <= max_token_layers) return false;
  // A decoder row reads its encoder row's K/V in every layer: it waits for
  // that row, which resumes later (the engine adds it again then).
  if (static_cast<int32_t>(step->rows.size()) > row_begin && step->rows.back().slot < 0) {
    step->rows.pop_back();
    step->seqs.back().row_end = static_cast<int32_t>(step->rows.size());
    step->rows.back().logits = true;  // split below like any row with logits
  }
  resume_layer_ = cap;
  resume_pos_.clear();
  resume_end_.clear();
  next_ = 0;
  keep_.assign(n_prompt - begin_, 1);
  for (size_t i = row_begin; i < step->rows.size(); ++i) {
    TokenRow& row = step->rows[i];
    if (end_of(row) <= cap || row.layer_begin >= cap) continue;
    resume_pos_.push_back(row.pos);
    resume_end_.push_back(end_of(row));
    row.layer_end = cap;
    row.capture_layer = cap;
    row.logits = false;
  }
  splitting_ = true;
  capturing_ = true;
  return true;
}

void PromptDeferral::drop(int32_t pos) {
  assert(splitting_ && pos >= begin_ && pos - begin_ < static_cast<int32_t>(keep_.size()));
  keep_[pos - begin_] = 0;
}

void PromptDeferral::after_split() {
  splitting_ = false;
  size_t j = 0;
  for (size_t i = 0; i < resume_pos_.size(); ++i) {
    if (!keep_[resume_pos_[i] - begin_]) continue;
    resume_pos_[j] = resume_pos_[i];
    resume_end_[j] = resume_end_[i];
    ++j;
  }
  resume_pos_.resize(j);
  resume_end_.resize(j);
  keep_.clear();
  if (j == 0) release();
}

int32_t PromptDeferral::pending_work(int32_t n_layers) const {
  int64_t rest = 0;
  for (size_t i = next_; i < resume_pos_.size(); ++i) rest += resume_end_[i] - resume_layer_;
  return static_cast<int32_t>((rest + n_layers - 1) / n_layers);
}

bool PromptDeferral::take(int64_t budget, int64_t* spent, int32_t* pos, int32_t* layer_end) {
  if (next_ >= resume_pos_.size()) return false;
  const int64_t cost = resume_end_[next_] - resume_layer_;
  if (*spent > 0 && *spent + cost > budget) return false;
  *pos = resume_pos_[next_];
  *layer_end = resume_end_[next_];
  ++next_;
  *spent += cost;
  return true;
}

void PromptDeferral::release() {
  if (scratch_ != nullptr) scratch_->release(holder_);
  scratch_ = nullptr;
  begin_ = -1;
  capturing_ = false;
  splitting_ = false;
  resume_layer_ = -1;
  resume_pos_.clear();
  resume_end_.clear();
  keep_.clear();
  next_ = 0;
}

}  // namespace agentkv
