// The rows of a chunk without segment reuse, as the request's planner lists
// them (SeqPlanner::chunk_rows, redo_rows), turned into a Step's rows; and
// the engine state the shared-K/V schemes need (docs/scheme_algorithms.md §1.2-1.3):
//  - LRAgent: each row writes its LR row (X·A^T of its adapter's v_proj) to
//    the request's LR blocks; rows whose base K/V came from the prefix cache
//    (positions before SchedRequest::kv_hit_tokens) keep it and write only
//    their LR row: BaseShared's "LR prefill". The sequence's attention reads
//    V_base + s·V_lr·B (Step::seq_lr).
//  - redo layers (SeqSharing::redo_layers, DroidSpeak's critical layers):
//    at a request's first chunk after admission, every cached position this
//    agent has not processed yet (another agent wrote it) gets a row that
//    runs the agent's forward and writes K/V in those layers only, overwriting the shared entries (LRAgent
//    App. D.6). A token an agent once processed is not redone when another agent later overwrote its critical
//    layers: as the paper's per-agent cache length. These rows ride with the chunk, beyond the scheduler's
//    token budget (it budgets tokens to compute, not rows; a known gap, docs/usage.md).
// The engine sees scheme decisions (SeqSharing) only; no scheme names here.
#include <cstring>

#include "runtime/serving_engine_impl.h"

namespace agentkv {

namespace {

// The owner component keeps, per slot, a 32-bit set of the agents that
// processed the token (bit tag % 32), in the bits of its float.
uint32_t processed_by(std::span<const float> row) {
  uint32_t m = 0;
  if (!row.empty()) std::memcpy(&m, row.data(), sizeof m);
  return m;
}

void set_processed(std::span<float> row, uint32_t m) { std::memcpy(row.data(), &m, sizeof m); }

}  // namespace

int32_t ServingEngineImpl::agent_tag(const Adapter* a) {
  if (a == nullptr) return 0;
  auto [it, fresh] = agent_tags_.try_emplace(a->id, static_cast<int32_t>(agent_tags_.size()) + 1);
  (void)fresh;
  return it->second;
}

void ServingEngineImpl::plan_rows(const ScheduledSeq& s, Live& l, int32_t adapter_index, Step* step,
                                  std::vector<LogitRow>* logit_rows) {
  SchedRequest* r = s.req;
  const int32_t bs = opts_.block_size;
  const bool lr = r->cache.has_pool() && lr_kv_ != nullptr && adapter_index >= 0;
  StepSeq q;
  q.row_begin = static_cast<int32_t>(step->rows.size());
  q.blocks = kv_->block_table(r->id);
  const ChunkSpan span{s.begin, s.n, s.sample, r->kv_hit_tokens, r->n_preemptions};
  add_redo_rows(span, l, adapter_index, q.blocks, step);
  const std::vector<int32_t>* lr_blocks = lr ? &lr_kv_->block_table(r->id) : nullptr;
  const bool owner_snaps = owner_snapshots(l);
  std::vector<RowSpec> specs;
  l.plan->chunk_rows(span, &specs);
  for (const RowSpec& rs : specs) {
    const int32_t pos = rs.index;
    TokenRow row;
    row.token = r->tokens[pos];
    row.pos = pos;
    row.slot = rs.write_kv ? int64_t{q.blocks[pos / bs]} * bs + pos % bs : -1;
    row.logits = rs.logits;
    row.adapter = rs.adapter ? adapter_index : -1;
    if (rs.write_lr && lr_blocks != nullptr) row.lr_slot = int64_t{(*lr_blocks)[pos / bs]} * bs + pos % bs;
    // Prompt logprobs: every prompt row that writes KV (or only its LR row)
    // also gives logits.
    const bool score =
        !rs.logits && (rs.write_kv || rs.write_lr) && l.prompt_logprobs >= 0 && pos + 1 < l.n_prompt;
    if (score) row.logits = true;
    if (row.logits) logit_rows->push_back({r->id, score ? pos : -1});
    mark_captures(l, &row);
    if (owner_snaps && row.slot >= 0) row.capture_layer = owner_layer_;
    step->rows.push_back(row);
  }
  q.row_end = static_cast<int32_t>(step->rows.size());
  if (lr) {
    step->seq_lr.resize(step->seqs.size() + 1);
    step->seq_lr.back() = StepSeqLr{adapter_index, *lr_blocks};
  }
  step->seqs.push_back(std::move(q));
}

void ServingEngineImpl::add_redo_rows(const ChunkSpan& span, Live& l, int32_t adapter_index,
                                      const std::vector<int32_t>& blocks, Step* step) {
  // Only a request with redo layers gets an agent tag (agent_tag assigns
  // one on first use, and tags share owner bits modulo 32).
  const SeqSharing& sharing = l.plan->sharing();
  if (owner_ == nullptr || sharing.redo_layers.empty() || sharing.adapter == nullptr) return;
  const int32_t bs = opts_.block_size;
  const auto slot_of = [&](int32_t p) { return int64_t{blocks[p / bs]} * bs + p % bs; };
  const uint32_t bit = uint32_t{1} << (agent_tag(sharing.adapter) % 32);
  std::vector<RowSpec> specs;
  l.plan->redo_rows(
      span,
      [&](int32_t p) {
        const int64_t slot = slot_of(p);
        return (processed_by(owner_->read(slot, generation_of(slot))) & bit) != 0;
      },
      &specs);
  if (specs.empty()) return;
  const bool snapshots = owner_snapshots(l);
  const int32_t mask = static_cast<int32_t>(step->write_masks.size());
  std::vector<uint8_t> m(model_->spec.n_layers, 0);
  for (int32_t layer : sharing.redo_layers) m[layer] = 1;
  step->write_masks.push_back(std::move(m));
  for (const RowSpec& rs : specs) {
    const int32_t p = rs.index;
    const int64_t slot = slot_of(p);
    TokenRow row;
    row.token = l.tokens[p];
    row.pos = p;
    row.slot = slot;
    row.adapter = adapter_index;
    row.write_mask = mask;
    row.layer_end = sharing.redo_layers.back() + 1;
    // From the snapshot at the first critical layer where one is kept (the
    // state of the agent that processed the token), else from layer 0,
    // keeping a snapshot on the way.
    const std::span<const float> h =
        snapshots ? owner_hidden_->read(slot, generation_of(slot)) : std::span<const float>();
    if (!h.empty()) {
      row.layer_begin = owner_layer_;
      row.hidden_in = static_cast<int32_t>(step->hidden_in.size() / model_->spec.d_model);
      step->hidden_in.insert(step->hidden_in.end(), h.begin(), h.end());
    } else if (snapshots) {
      row.capture_layer = owner_layer_;
    }
    step->rows.push_back(row);
  }
}

bool ServingEngineImpl::owner_snapshots(const Live& l) const {
  return owner_hidden_ != nullptr && !l.plan->sharing().redo_layers.empty() &&
         l.plan->sharing().redo_layers.front() == owner_layer_;
}

void ServingEngineImpl::store_owners(const Step& step, const std::vector<Live*>& seq_of) {
  for (size_t q = 0; q < step.seqs.size() && q < seq_of.size(); ++q) {
    const Live* l = seq_of[q];
    if (l == nullptr || l->plan->sharing().redo_layers.empty()) continue;
    const uint32_t bit = uint32_t{1} << (agent_tag(l->plan->sharing().adapter) % 32);
    const StepSeq& sq = step.seqs[q];
    for (int32_t i = sq.row_begin; i < sq.row_end; ++i) {
      const TokenRow& row = step.rows[i];
      if (row.slot < 0 || row.adapter < 0) continue;
      const uint32_t gen = generation_of(row.slot);
      // A recompute row adds the agent to those that processed the token; a
      // row of new K/V (all layers) makes it the only one.
      const uint32_t before = row.write_mask >= 0 ? processed_by(owner_->read(row.slot, gen)) : 0;
      set_processed(owner_->write(row.slot, gen), before | bit);
    }
  }
}

}  // namespace agentkv
