// Whole-prompt selection under chunked prefill (SeqPlanner::
// whole_prompt_layer; DESIGN.md §2 as proposed in issue 15's notes).
//
// A planner that selects at layer ℓ over the whole prompt gets one plan,
// however the scheduler chunks the prompt:
//  - every chunk before the last runs its positions up to ℓ and stops; the
//    hidden state each stops with waits in a KvScratch, in blocks lent by the
//    KV pool, so it counts against the KV budget (d_model floats a position);
//  - the last chunk plans every position from the first deferred one on, and
//    the earlier positions resume at ℓ from their hidden states;
//  - when that last step would exceed the step budget (--max-batch-tokens
//    tokens of all layers), its rows stop above the last hook instead,
//    capturing their state there; the rows the hooks kept run in later steps
//    from that layer, in position order, within the budget, as shares of
//    work with no tokens (SchedRequest::pending_work). The first token is
//    sampled from the last of them. Position order keeps it exact: a row's
//    keys at every layer are written by rows of the same or earlier steps.
// The scheduler sees only token rows of work; no scheme name reaches here.
#include <algorithm>

#include "runtime/serving_engine_impl.h"

namespace agentkv {

TokenRow ServingEngineImpl::prompt_row(const Live& l, const SchedRequest& r, const std::vector<int32_t>& blocks,
                                       int32_t p, int32_t adapter_index) const {
  const int32_t bs = opts_.block_size;
  TokenRow row;
  row.token = r.tokens[p];
  row.pos = p;
  row.slot = int64_t{blocks[p / bs]} * bs + p % bs;
  row.adapter = p >= l.plan->sharing().weights_from ? adapter_index : -1;
  return row;
}

int32_t ServingEngineImpl::whole_prompt_layer(const Live& l) const {
  // Not when the rows' one capture is relay's, a profiler watches every
  // layer, there is nothing reused, or the pool could not hold the states.
  if (l.capture || l.kv_probe || l.hits.empty() || l.whole_prompt_off) return -1;
  return l.plan->whole_prompt_layer(model_->spec.n_layers);
}

bool ServingEngineImpl::defer_chunk(const ScheduledSeq& s, Live& l, int32_t sel, int32_t adapter_index, StepSeq q,
                                    Step* step) {
  SchedRequest* r = s.req;
  const int32_t b = s.begin, e = std::min(s.begin + s.n, l.n_prompt);
  if (l.defer_begin < 0) {
    // Room for every position from here to the prompt's end: the states at
    // the selection layer, and later those of the rows kept above it.
    if (!defer_->reserve(l.id, l.n_prompt - b)) {
      l.whole_prompt_off = true;
      return false;
    }
    l.defer_begin = b;
  }
  // At layer 0 there is nothing to wait with: the chunk runs layer 0, and
  // again with the last chunk.
  l.defer_step = sel > 0;
  for (int32_t p = b; p < e; ++p) {
    TokenRow row = prompt_row(l, *r, q.blocks, p, adapter_index);
    row.layer_end = std::max(sel, 1);
    if (sel > 0) row.capture_layer = sel;
    step->rows.push_back(row);
  }
  q.row_end = static_cast<int32_t>(step->rows.size());
  step->seqs.push_back(std::move(q));
  // The last chunk also runs these positions at the selection layer: about
  // one layer each, counted in its share of the budget.
  const int32_t n_layers = model_->spec.n_layers;
  r->prompt_end_work = (e - l.defer_begin + n_layers - 1) / n_layers;
  return true;
}

void ServingEngineImpl::split_rows(Live& l, SchedRequest* r, int32_t row_begin, int32_t last_hook, Step* step) {
  const int32_t n_layers = model_->spec.n_layers;
  const int32_t cap = last_hook + 1;
  auto end_of = [&](const TokenRow& row) { return row.layer_end == kAllLayers ? n_layers : row.layer_end; };
  int64_t cost = 0;
  for (size_t i = row_begin; i < step->rows.size(); ++i) cost += end_of(step->rows[i]) - step->rows[i].layer_begin;
  if (cap >= n_layers || cost <= int64_t{opts_.max_batch_tokens} * n_layers) return;
  // An ICaRus decoder row reads its encoder row's K/V in every layer: it
  // waits for that row, which resumes later (plan_resume adds it again).
  if (static_cast<int32_t>(step->rows.size()) > row_begin && step->rows.back().slot < 0) {
    step->rows.pop_back();
    step->seqs.back().row_end = static_cast<int32_t>(step->rows.size());
    step->rows.back().logits = true;  // split below like any row with logits
  }
  l.resume_layer = cap;
  l.resume_pos.clear();
  l.resume_end.clear();
  l.resume_next = 0;
  l.resume_keep.assign(l.n_prompt - l.defer_begin, 1);
  for (size_t i = row_begin; i < step->rows.size(); ++i) {
    TokenRow& row = step->rows[i];
    if (end_of(row) <= cap || row.layer_begin >= cap) continue;
    l.resume_pos.push_back(row.pos);
    l.resume_end.push_back(end_of(row));
    row.layer_end = cap;
    row.capture_layer = cap;
    row.logits = false;
  }
  l.split_step = true;
  l.defer_step = true;
  r->prompt_end_work = 0;
}

void ServingEngineImpl::after_split(Live& l, SchedRequest* r) {
  l.split_step = false;
  size_t j = 0;
  for (size_t i = 0; i < l.resume_pos.size(); ++i) {
    if (!l.resume_keep[l.resume_pos[i] - l.defer_begin]) continue;
    l.resume_pos[j] = l.resume_pos[i];
    l.resume_end[j] = l.resume_end[i];
    ++j;
  }
  l.resume_pos.resize(j);
  l.resume_end.resize(j);
  l.resume_keep.clear();
  if (r != nullptr) r->pending_work = pending_work(l);
  if (j == 0) release_defer(l);
}

void ServingEngineImpl::plan_resume(const ScheduledSeq& s, Live& l, int32_t adapter_index, Step* step,
                                    std::vector<LogitRow>* logit_rows) {
  SchedRequest* r = s.req;
  // One StepSeq per scheduled share, even an empty one.
  StepSeq q;
  q.row_begin = static_cast<int32_t>(step->rows.size());
  q.row_end = q.row_begin;
  q.blocks = kv_->block_table(r->id);
  if (l.resume_layer < 0) {  // nothing waits (cannot happen: pending_work comes with the rows)
    r->pending_work = 0;
    step->seqs.push_back(std::move(q));
    return;
  }
  const int64_t d_model = model_->spec.d_model;
  const int64_t budget = int64_t{s.work} * model_->spec.n_layers;
  int64_t spent = 0;
  while (l.resume_next < l.resume_pos.size()) {
    const int64_t cost = l.resume_end[l.resume_next] - l.resume_layer;
    if (spent > 0 && spent + cost > budget) break;
    const int32_t p = l.resume_pos[l.resume_next++];
    TokenRow row = prompt_row(l, *r, q.blocks, p, adapter_index);
    row.layer_begin = l.resume_layer;
    row.layer_end = l.resume_end[l.resume_next - 1];
    row.hidden_in = static_cast<int32_t>(step->hidden_in.size() / d_model);
    step->hidden_in.resize(step->hidden_in.size() + d_model);
    defer_->get(l.id, p - l.defer_begin, step->hidden_in.data() + int64_t{row.hidden_in} * d_model);
    // The prompt's last row is the last to run: the first token comes from it.
    row.logits = p == l.n_prompt - 1;
    step->rows.push_back(row);
    add_decoder_row(l, adapter_index, step);
    if (row.logits) logit_rows->push_back({r->id, -1});
    spent += cost;
  }
  q.row_end = static_cast<int32_t>(step->rows.size());
  step->seqs.push_back(std::move(q));
  r->pending_work = pending_work(l);
  // The rows read their states already (into the step): the scratch can go.
  if (l.resume_next == l.resume_pos.size()) release_defer(l);
}

int32_t ServingEngineImpl::pending_work(const Live& l) const {
  const int32_t n_layers = model_->spec.n_layers;
  int64_t rest = 0;
  for (size_t i = l.resume_next; i < l.resume_pos.size(); ++i) rest += l.resume_end[i] - l.resume_layer;
  return static_cast<int32_t>((rest + n_layers - 1) / n_layers);
}

void ServingEngineImpl::release_defer(Live& l) {
  defer_->release(l.id);
  l.defer_begin = -1;
  l.defer_step = false;
  l.split_step = false;
  l.resume_layer = -1;
  l.resume_pos.clear();
  l.resume_end.clear();
  l.resume_keep.clear();
  l.resume_next = 0;
}

}  // namespace agentkv
