// Segment reuse in the serving engine (docs/design.md §2, SegmentIndex; the
// planners live in sharing/): per chunk, the lookup and copies
// (segment_reuse.h), then the planner's rows and hooks as Step rows and
// LayerHooks; and the captures a step's rows made, stored after it.
// Whole-prompt selection across chunks is in serving_engine_defer.cpp.
#include <algorithm>

#include "runtime/serving_engine_impl.h"

namespace agentkv {

void ServingEngineImpl::add_decoder_row(const Live& l, int32_t adapter_index, Step* step) const {
  TokenRow& encoder = step->rows.back();
  if (!l.plan->sharing().decoder_row || !encoder.logits) return;
  // ICaRus: the encoder row writes the position's K/V; the decoder row
  // (adapter weights, every layer, no K/V) reads it and gives the logits.
  encoder.logits = false;
  TokenRow decoder;
  decoder.token = encoder.token;
  decoder.pos = encoder.pos;
  decoder.slot = -1;
  decoder.adapter = adapter_index;
  decoder.logits = true;
  step->rows.push_back(decoder);
}

void ServingEngineImpl::plan_reuse(const ScheduledSeq& s, Live& l, int32_t adapter_index, Step* step) {
  SchedRequest* r = s.req;
  reuse_.lookup(l.reuse, *r, l.plan->sharing().lineage_from, s.begin);
  const int32_t b = s.begin, e = std::min(s.begin + s.n, l.n_prompt);
  StepSeq q;
  q.row_begin = static_cast<int32_t>(step->rows.size());
  q.blocks = kv_->block_table(r->id);
  reuse_.queue_copies(l.reuse, b, e, q.blocks, step);
  // One selection over the whole prompt (SeqPlanner::whole_prompt_layer):
  // the chunks before the last run up to its layer and wait.
  const int32_t sel = whole_prompt_layer(l);
  if (sel >= 0 && e < l.n_prompt && defer_chunk(s, l, sel, adapter_index, q, step)) return;
  const int32_t cb = sel >= 0 && l.defer.started() ? l.defer.begin() : b;  // the planned range's begin
  std::vector<ReuseRow> want;
  std::vector<ReuseHook> hooks;
  l.plan->plan_chunk(reuse_.chunk(l.reuse, cb, e), &want, &hooks);
  const std::vector<int32_t> row_of = add_reuse_rows(s, l, cb, sel, want, adapter_index, q.blocks, step);
  q.row_end = static_cast<int32_t>(step->rows.size());
  const int32_t seq_index = static_cast<int32_t>(step->seqs.size());
  step->seqs.push_back(std::move(q));
  // Rows of earlier chunks too: the step may be too large for the budget.
  int32_t last_hook = -1;
  for (const ReuseHook& h : hooks) last_hook = std::max(last_hook, h.layer);
  if (cb < b && last_hook >= 0) split_rows(l, r, q.row_begin, last_hook, step);
  if (cb < b && !l.defer.splitting()) l.defer.release();
  add_reuse_hooks(l, std::move(hooks), seq_index, cb, e, row_of, step);
  if (l.kv_probe) add_kv_probes(l, seq_index, step);
}

std::vector<int32_t> ServingEngineImpl::add_reuse_rows(const ScheduledSeq& s, Live& l, int32_t cb,
                                                       int32_t sel, std::vector<ReuseRow>& want,
                                                       int32_t adapter_index,
                                                       const std::vector<int32_t>& blocks, Step* step) {
  const int32_t b = s.begin, e = std::min(s.begin + s.n, l.n_prompt);
  const int64_t d_model = model_->spec.d_model;
  // Rows in position order: every position not reused runs every layer; a
  // reused one runs where the planner wants it.
  std::vector<int32_t> row_of(e - cb, -1);
  size_t w = 0;
  std::sort(want.begin(), want.end(), [](const ReuseRow& x, const ReuseRow& y) { return x.pos < y.pos; });
  for (int32_t p = cb; p < e; ++p) {
    while (w < want.size() && want[w].pos < p) ++w;
    const bool planned = w < want.size() && want[w].pos == p;
    if (l.reuse.reused[p] && !planned) continue;
    TokenRow row = prompt_row(l, *s.req, blocks, p, adapter_index);
    row.logits = s.sample && p == e - 1;
    if (p < b) {
      // An earlier chunk ran it up to the selection layer: it resumes there
      // (from layer 0 when that is the selection layer).
      row.layer_end = planned ? want[w].layer_end : kAllLayers;
      if (sel > 0) {
        row.layer_begin = sel;
        row.hidden_in = static_cast<int32_t>(step->hidden_in.size() / d_model);
        step->hidden_in.resize(step->hidden_in.size() + d_model);
        l.defer.get(p, step->hidden_in.data() + int64_t{row.hidden_in} * d_model);
      }
    } else if (l.reuse.reused[p]) {
      row.layer_end = want[w].layer_end;
      reuse_.resume_row(l.reuse, want[w].layer_begin, d_model, &row, step);
    } else if (l.capture) {
      captures_.mark(l.n_prompt, &row);
    }
    row_of[p - cb] = static_cast<int32_t>(step->rows.size());
    step->rows.push_back(row);
    add_decoder_row(l, adapter_index, step);
  }
  return row_of;
}

void ServingEngineImpl::add_reuse_hooks(Live& l, std::vector<ReuseHook> hooks, int32_t seq_index, int32_t cb,
                                        int32_t e, const std::vector<int32_t>& row_of, Step* step) const {
  for (ReuseHook& h : hooks) {
    LayerHook lh;
    lh.seq = seq_index;
    lh.layer = h.layer;
    for (int32_t p : h.colsum_pos) {
      if (p >= cb && p < e && row_of[p - cb] >= 0) lh.colsum_rows.push_back(row_of[p - cb]);
    }
    std::sort(lh.colsum_rows.begin(), lh.colsum_rows.end());
    // The step outlives the call; its rows give each hooked row's position.
    lh.fn = [rows = &step->rows, fn = std::move(h.fn), head_dim = int64_t{model_->spec.head_dim},
             split = l.defer.splitting() ? &l : nullptr](const HookView& v, std::span<uint8_t> keep) {
      std::vector<int32_t> pos(v.rows.size());
      for (size_t i = 0; i < pos.size(); ++i) pos[i] = (*rows)[v.rows[i]].pos;
      ReuseHookView rv;
      rv.pos = pos;
      rv.v = v.v;
      rv.cached_v = v.cached_v;
      rv.k = v.k;
      rv.cached_k = v.cached_k;
      rv.kv_dim = v.kv_dim;
      rv.head_dim = head_dim;
      rv.colsum = v.colsum;
      fn(rv, keep);
      if (split == nullptr) return;
      // Split step: the rows stop above the hooks either way, so the
      // verdicts are kept for after_split. The prompt's last row would have
      // stayed for its logits.
      for (size_t i = 0; i < pos.size(); ++i) {
        if (pos[i] == split->n_prompt - 1) keep[i] = 1;
        if (!keep[i]) split->defer.drop(pos[i]);
      }
    };
    step->hooks.push_back(std::move(lh));
  }
}

void ServingEngineImpl::add_kv_probes(Live& l, int32_t seq_index, Step* step) const {
  // Profilers: every layer's fresh and copied V of the reused rows.
  for (int32_t layer = 0; layer < model_->spec.n_layers; ++layer) {
    LayerHook lh;
    lh.seq = seq_index;
    lh.layer = layer;
    lh.fn = [rows = &step->rows, reused = &l.reuse.reused, probe = &l.kv_probe, layer,
             head_dim = int64_t{model_->spec.head_dim}](const HookView& v, std::span<uint8_t> keep) {
      (void)keep;
      std::vector<int32_t> pos;
      std::vector<float> k, ck, fresh, cached;
      auto take = [&](std::vector<float>& to, const float* from, size_t i) {
        to.insert(to.end(), from + i * v.kv_dim, from + (i + 1) * v.kv_dim);
      };
      for (size_t i = 0; i < v.rows.size(); ++i) {
        const int32_t p = (*rows)[v.rows[i]].pos;
        if (p >= static_cast<int32_t>(reused->size()) || !(*reused)[p]) continue;
        pos.push_back(p);
        take(k, v.k, i);
        take(ck, v.cached_k, i);
        take(fresh, v.v, i);
        take(cached, v.cached_v, i);
      }
      ServeRequestHooks::KvProbe pr;
      pr.layer = layer;
      pr.pos = pos.data();
      pr.n = static_cast<int64_t>(pos.size());
      pr.k = k.data();
      pr.cached_k = ck.data();
      pr.v = fresh.data();
      pr.cached_v = cached.data();
      pr.kv_dim = v.kv_dim;
      pr.head_dim = head_dim;
      if (pr.n > 0) (*probe)(pr);
    };
    step->hooks.push_back(std::move(lh));
  }
}

void ServingEngineImpl::store_captures(const Step& step, const StepOutput& so, const std::vector<Live*>& seq_of) {
  const int64_t d = model_->spec.d_model;
  int64_t ci = 0;
  for (size_t q = 0; q < step.seqs.size(); ++q) {
    // A request with redo layers captures its owner snapshots; others, the
    // capture component's.
    const bool redo =
        q < seq_of.size() && seq_of[q] != nullptr && !seq_of[q]->plan->sharing().redo_layers.empty();
    KvComponent* to = redo ? owners_.hidden() : captures_.hidden();
    // A chunk run only through its whole-prompt selection layer: its
    // captures wait in the request for the prompt's last chunk.
    PromptDeferral* defer = q < seq_of.size() && seq_of[q] != nullptr && seq_of[q]->defer.capturing()
                                ? &seq_of[q]->defer
                                : nullptr;
    if (defer != nullptr) defer->set_capturing(false);
    for (int32_t r = step.seqs[q].row_begin; r < step.seqs[q].row_end; ++r) {
      const TokenRow& row = step.rows[r];
      if (row.capture_layer < 0) continue;
      const float* h = so.captures.data() + ci++ * d;
      if (defer != nullptr) {
        defer->put(row.pos, h);
        continue;
      }
      if (to == nullptr) continue;
      std::span<float> dst = to->write(row.slot, kv_->slot_generation(row.slot));
      std::copy(h, h + d, dst.begin());
    }
  }
  for (size_t q = 0; q < step.seqs.size() && q < seq_of.size(); ++q) {
    if (seq_of[q] != nullptr) captures_.add_influence(step, so, q, seq_of[q]->n_prompt);
  }
}

}  // namespace agentkv
