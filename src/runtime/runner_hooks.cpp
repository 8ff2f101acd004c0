// The runner's hooks and captures (runner.h): a layer's hooks see the
// rows' fresh and cached K/V (and attention column sums) and may drop rows;
// influence scores (attention mass each key receives) are collected per
// layer.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/runner.h"

namespace agentkv {

void Runner::run_hooks(const Step& step, int layer) {
  const ModelSpec& s = model_->spec;
  const KvGeometry& g = kv_->geometry();
  const int64_t qd = s.q_dim(), kvd = s.kv_dim();
  // Cached K/V the hooked rows are about to overwrite, gathered before the
  // write: [hook rows in hook order][kv_dim].
  struct Pending {
    const LayerHook* hook;
    int32_t c_begin, c_end;  // compact rows of the hook's sequence
    int64_t gathered;        // offset into hook_k_/hook_v_ in rows
  };
  std::vector<Pending> pend;
  int64_t n_gather = 0;
  for (const LayerHook& h : step.hooks) {
    if (h.layer != layer) continue;
    const int32_t cb = row_indptr_[h.seq], ce = row_indptr_[h.seq + 1];
    if (cb == ce) continue;
    pend.push_back({&h, cb, ce, n_gather});
    n_gather += ce - cb;
  }
  hook_k_.resize(n_gather * kvd);
  hook_v_.resize(n_gather * kvd);
  for (const Pending& p : pend) {
    const std::vector<int32_t>& blocks = step.seqs[p.hook->seq].blocks;
    for (int32_t i = p.c_begin; i < p.c_end; ++i) {
      const int32_t pos = row_pos_[i];
      const int32_t b = blocks[pos / g.block_size], off = pos % g.block_size;
      const int64_t at = (p.gathered + i - p.c_begin) * kvd;
      kv_->read_k(layer, b, off, &hook_k_[at]);
      kv_->read_v(layer, b, off, &hook_v_[at]);
    }
  }
  KvLayerView kv = kv_->layer_view(layer);
  backend_->kv_write(kv, k_.data(), v_.data(), write_slots(step, layer),
                     static_cast<int64_t>(active_.size()));

  bool any_dropped = false;
  for (const Pending& p : pend) {
    const LayerHook& h = *p.hook;
    const int32_t n = p.c_end - p.c_begin;
    HookView view;
    view.layer = layer;
    view.rows = std::span<const int32_t>(active_.data() + p.c_begin, n);
    view.q = &q_[p.c_begin * qd];
    view.k = &k_[p.c_begin * kvd];
    view.v = &v_[p.c_begin * kvd];
    view.cached_k = &hook_k_[p.gathered * kvd];
    view.cached_v = &hook_v_[p.gathered * kvd];
    view.q_dim = qd;
    view.kv_dim = kvd;
    if (!h.colsum_rows.empty()) hook_colsums(step, h, p.c_begin, kv, &view);
    keep_.assign(n, 1);
    h.fn(view, keep_);
    for (int32_t i = 0; i < n; ++i) {
      const int32_t r = view.rows[i];
      if (keep_[i] || step.rows[r].logits) continue;  // rows with logits always stay
      dropped_[r] = 1;
      any_dropped = true;
    }
  }
  if (any_dropped) compact_active(step);
}

// The attention column sums a hook asked for (LayerHook::colsum_rows), over
// the cache as it stands after this layer's write.
void Runner::hook_colsums(const Step& step, const LayerHook& h, int32_t c_begin, const KvLayerView& kv,
                          HookView* view) {
  const ModelSpec& s = model_->spec;
  const int64_t qd = s.q_dim();
  const int64_t nq = static_cast<int64_t>(h.colsum_rows.size());
  hook_q_.resize(nq * qd);
  hook_pos_.resize(nq);
  int32_t n_keys = 0;
  int64_t qi = 0;
  for (int32_t r : h.colsum_rows) {
    // validate() checked that r belongs to the hook's sequence; skip rows
    // not active at this layer.
    auto it = std::lower_bound(view->rows.begin(), view->rows.end(), r);
    if (it == view->rows.end() || *it != r) continue;
    const int64_t ci = c_begin + (it - view->rows.begin());
    std::memcpy(&hook_q_[qi * qd], &q_[ci * qd], sizeof(float) * qd);
    hook_pos_[qi] = row_pos_[ci];
    n_keys = std::max(n_keys, row_pos_[ci] + 1);
    ++qi;
  }
  colsum_.assign(n_keys, 0.0f);
  const std::vector<int32_t>& blocks = step.seqs[h.seq].blocks;
  if (qi > 0) {
    backend_->attention_colsum(hook_q_.data(), hook_pos_.data(), qi, s.n_heads, blocks.data(),
                               static_cast<int32_t>(blocks.size()), n_keys, kv,
                               s.attn_scale, colsum_.data(), s.layer_window(h.layer));
  }
  view->colsum = colsum_;
}

// Compacts the rows a hook kept: their residual and queries (their K/V are
// written), then the attention plan.
void Runner::compact_active(const Step& step) {
  const ModelSpec& s = model_->spec;
  const int64_t qd = s.q_dim();
  size_t j = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    if (dropped_[active_[i]]) continue;
    if (j != i) {
      std::memcpy(&x_[j * s.d_model], &x_[i * s.d_model], sizeof(float) * s.d_model);
      std::memcpy(&q_[j * qd], &q_[i * qd], sizeof(float) * qd);
      active_[j] = active_[i];
    }
    ++j;
  }
  active_.resize(j);
  rebuild_plan(step);
}

void Runner::plan_influence(const Step& step) {
  influence_slot_.assign(active_.size(), -1);
  int32_t n = 0, stride = 0;
  for (size_t i = 0; i < active_.size(); ++i) {
    if (!step.rows[active_[i]].influence) continue;
    influence_slot_[i] = n++;
    stride = std::max(stride, row_pos_[i] + 1);
  }
  plan_.colsum_slot = n > 0 ? influence_slot_.data() : nullptr;
  plan_.colsum_stride = stride;
  influence_buf_.assign(static_cast<size_t>(n) * kv_->geometry().kv_heads * stride, 0.0f);
  plan_.colsum = influence_buf_.data();
}

void Runner::collect_influence(const Step& step, StepOutput* out) {
  if (plan_.colsum_slot == nullptr) return;
  const int32_t bs = kv_->geometry().block_size, kvh = kv_->geometry().kv_heads;
  for (size_t i = 0; i < active_.size(); ++i) {
    const int32_t slot = influence_slot_[i];
    if (slot < 0) continue;
    const int32_t q = row_seq_[active_[i]];
    std::vector<float>& acc = out->influence[q];
    if (acc.empty()) acc.assign(step.seqs[q].blocks.size() * static_cast<size_t>(bs), 0.0f);
    for (int32_t h = 0; h < kvh; ++h) {
      const float* line = &influence_buf_[(static_cast<size_t>(slot) * kvh + h) * plan_.colsum_stride];
      for (int32_t j = 0; j <= row_pos_[i]; ++j) acc[j] += line[j];
    }
  }
  plan_.colsum_slot = nullptr;
  plan_.colsum = nullptr;
}

}  // namespace agentkv
