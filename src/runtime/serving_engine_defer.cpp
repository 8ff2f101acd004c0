// Whole-prompt selection under chunked prefill, as the serving engine drives
// it (SeqPlanner::whole_prompt_layer; the per-request state and its rules
// are runtime/prompt_deferral.h). A planner that selects at layer ℓ over the
// whole prompt gets one plan, however the scheduler chunks the prompt: the
// chunks before the last run up to ℓ and wait; the last plans every position
// from the first deferred one on; when that step would exceed the step
// budget (--max-batch-tokens tokens of all layers) its rows stop above the
// last hook and the kept ones run in later steps as shares of work with no
// tokens (SchedRequest::pending_work). The first token is sampled from the
// last of them. The scheduler sees only token rows of work; no scheme name
// reaches here.
#include <algorithm>

#include "runtime/serving_engine_impl.h"

namespace agentkv {

TokenRow ServingEngineImpl::prompt_row(const Live& l, const SchedRequest& r, const std::vector<int32_t>& blocks,
                                       int32_t p, int32_t adapter_index) const {
  const int32_t bs = opts_.block_size;
  TokenRow row;
  row.token = r.tokens[p];
  row.pos = p;
  row.slot = kv_slot(blocks, p, bs);
  row.adapter = p >= l.plan->sharing().weights_from ? adapter_index : -1;
  return row;
}

int32_t ServingEngineImpl::whole_prompt_layer(const Live& l) const {
  // Not when the rows' one capture is relay's, a profiler watches every
  // layer, there is nothing reused, or the pool could not hold the states.
  if (l.capture || l.kv_probe || l.reuse.hits.empty() || l.defer.off()) return -1;
  return l.plan->whole_prompt_layer(model_->spec.n_layers);
}

bool ServingEngineImpl::defer_chunk(const ScheduledSeq& s, Live& l, int32_t sel, int32_t adapter_index, StepSeq q,
                                    Step* step) {
  SchedRequest* r = s.req;
  const int32_t b = s.begin, e = std::min(s.begin + s.n, l.n_prompt);
  if (!l.defer.start(defer_.get(), l.id, b, l.n_prompt)) return false;
  // At layer 0 there is nothing to wait with: the chunk runs layer 0, and
  // again with the last chunk.
  l.defer.set_capturing(sel > 0);
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
  r->prompt_end_work = (e - l.defer.begin() + n_layers - 1) / n_layers;
  return true;
}

void ServingEngineImpl::split_rows(Live& l, SchedRequest* r, int32_t row_begin, int32_t last_hook, Step* step) {
  const int32_t n_layers = model_->spec.n_layers;
  if (l.defer.split(step, row_begin, last_hook, n_layers, int64_t{opts_.max_batch_tokens} * n_layers,
                    l.n_prompt)) {
    r->prompt_end_work = 0;
  }
}

void ServingEngineImpl::after_split(Live& l, SchedRequest* r) {
  l.defer.after_split();
  if (r != nullptr) r->pending_work = l.defer.pending_work(model_->spec.n_layers);
}

void ServingEngineImpl::plan_resume(const ScheduledSeq& s, Live& l, int32_t adapter_index, Step* step,
                                    std::vector<LogitRow>* logit_rows) {
  SchedRequest* r = s.req;
  // One StepSeq per scheduled share, even an empty one.
  StepSeq q;
  q.row_begin = static_cast<int32_t>(step->rows.size());
  q.row_end = q.row_begin;
  q.blocks = kv_->block_table(r->id);
  if (!l.defer.resuming()) {  // nothing waits (cannot happen: pending_work comes with the rows)
    r->pending_work = 0;
    step->seqs.push_back(std::move(q));
    return;
  }
  const int64_t d_model = model_->spec.d_model;
  const int64_t budget = int64_t{s.work} * model_->spec.n_layers;
  int64_t spent = 0;
  int32_t p = 0, layer_end = 0;
  while (l.defer.take(budget, &spent, &p, &layer_end)) {
    TokenRow row = prompt_row(l, *r, q.blocks, p, adapter_index);
    row.layer_begin = l.defer.resume_layer();
    row.layer_end = layer_end;
    row.hidden_in = static_cast<int32_t>(step->hidden_in.size() / d_model);
    step->hidden_in.resize(step->hidden_in.size() + d_model);
    l.defer.get(p, step->hidden_in.data() + int64_t{row.hidden_in} * d_model);
    // The prompt's last row is the last to run: the first token comes from it.
    row.logits = p == l.n_prompt - 1;
    step->rows.push_back(row);
    add_decoder_row(l, adapter_index, step);
    if (row.logits) logit_rows->push_back({r->id, -1});
  }
  q.row_end = static_cast<int32_t>(step->rows.size());
  step->seqs.push_back(std::move(q));
  r->pending_work = l.defer.pending_work(model_->spec.n_layers);
  // The rows read their states already (into the step): the scratch can go.
  if (l.defer.all_taken()) l.defer.release();
}

}  // namespace agentkv
