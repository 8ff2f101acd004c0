// The rows of a chunk without segment reuse, as the request's planner lists
// them (SeqPlanner::chunk_rows, redo_rows), turned into a Step's rows; and
// the engine state the shared-K/V schemes need (docs/scheme_algorithms.md §1.2-1.3):
//  - LRAgent: each row writes its LR row (X·A^T of its adapter's v_proj) to
//    the request's LR blocks; rows whose base K/V came from the prefix cache
//    (positions before SchedRequest::kv_hit_tokens) keep it and write only
//    their LR row: BaseShared's "LR prefill". The sequence's attention reads
//    V_base + s·V_lr·B (Step::seq_lr).
//  - redo layers (SeqSharing::redo_layers, DroidSpeak's critical layers):
//    the rows that redo cached tokens another agent wrote, and the tags of
//    who processed each slot, are runtime/owner_tags.h's.
// The engine sees scheme decisions (SeqSharing) only; no scheme names here.
#include "runtime/serving_engine_impl.h"

namespace agentkv {

void ServingEngineImpl::plan_rows(const ScheduledSeq& s, Live& l, int32_t adapter_index, Step* step,
                                  std::vector<LogitRow>* logit_rows) {
  SchedRequest* r = s.req;
  const int32_t bs = opts_.block_size;
  const bool lr = r->cache.has_pool() && lr_kv_ != nullptr && adapter_index >= 0;
  StepSeq q;
  q.row_begin = static_cast<int32_t>(step->rows.size());
  q.blocks = kv_->block_table(r->id);
  const ChunkSpan span{s.begin, s.n, s.sample, r->kv_hit_tokens, r->n_preemptions};
  owners_.add_redo_rows(span, *l.plan, r->tokens, adapter_index, q.blocks, step);
  const std::vector<int32_t>* lr_blocks = lr ? &lr_kv_->block_table(r->id) : nullptr;
  const bool owner_snaps = owners_.snapshots(l.plan->sharing());
  std::vector<RowSpec> specs;
  l.plan->chunk_rows(span, &specs);
  for (const RowSpec& rs : specs) {
    const int32_t pos = rs.index;
    TokenRow row;
    row.token = r->tokens[pos];
    row.pos = pos;
    row.slot = rs.write_kv ? kv_slot(q.blocks, pos, bs) : -1;
    row.logits = rs.logits;
    row.adapter = rs.adapter ? adapter_index : -1;
    if (rs.write_lr && lr_blocks != nullptr) row.lr_slot = kv_slot(*lr_blocks, pos, bs);
    // Prompt logprobs: every prompt row that writes KV (or only its LR row)
    // also gives logits.
    const bool score =
        !rs.logits && (rs.write_kv || rs.write_lr) && l.prompt_logprobs >= 0 && pos + 1 < l.n_prompt;
    if (score) row.logits = true;
    if (row.logits) logit_rows->push_back({r->id, score ? pos : -1});
    if (l.capture) captures_.mark(l.n_prompt, &row);
    if (owner_snaps && row.slot >= 0) row.capture_layer = owners_.layer();
    step->rows.push_back(row);
  }
  q.row_end = static_cast<int32_t>(step->rows.size());
  if (lr) {
    step->seq_lr.resize(step->seqs.size() + 1);
    step->seq_lr.back() = StepSeqLr{adapter_index, *lr_blocks};
  }
  step->seqs.push_back(std::move(q));
}

}  // namespace agentkv
