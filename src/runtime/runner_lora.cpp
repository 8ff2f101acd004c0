// The runner's adapters (runner.h): rows grouped by adapter and each
// group's LoRA deltas, and LRAgent's LR cache (the v_proj X·A^T written per
// row, and the attention plan that reads it).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/runner.h"

namespace agentkv {

void Runner::plan_adapters(const Step& step) {
  groups_.resize(step.adapters.size());
  for (size_t i = 0; i < step.adapters.size(); ++i) {
    groups_[i].adapter = step.adapters[i];
    groups_[i].rows.clear();
    groups_[i].kv_rows.clear();
    groups_[i].v_rows.clear();
    groups_[i].lr_rows.clear();
  }
  for (size_t i = 0; i < active_.size(); ++i) {
    const TokenRow& row = step.rows[active_[i]];
    if (row.adapter < 0) continue;
    AdapterGroup& g = groups_[row.adapter];
    const int32_t ci = static_cast<int32_t>(i);
    g.rows.push_back(ci);
    const bool lr_seq = !step.seq_lr.empty() && step.seq_lr[row_seq_[active_[i]]].adapter >= 0;
    if (row.slot >= 0) g.kv_rows.push_back(ci);
    if (row.slot >= 0 && !lr_seq) g.v_rows.push_back(ci);
    if (row.lr_slot >= 0) g.lr_rows.push_back(ci);
  }
}

void Runner::apply_lora(int layer, LoraTarget t, const float* x, int64_t k, float* y, int64_t n) {
  for (const AdapterGroup& g : groups_) {
    const std::vector<int32_t>& rows = t == LoraTarget::kK   ? g.kv_rows
                                       : t == LoraTarget::kV ? g.v_rows
                                                             : g.rows;
    if (rows.empty()) continue;
    const LoraMatrix& m = g.adapter->layers[layer].at(t);
    if (m.empty()) continue;
    backend_->lora(x, k, LoraView{m.a.data(), m.b.data(), m.rank, m.scale}, rows.data(),
                   static_cast<int64_t>(rows.size()), y, n);
  }
}

void Runner::write_lr(int layer) {
  const int64_t d = model_->spec.d_model;
  for (const AdapterGroup& g : groups_) {
    if (g.lr_rows.empty()) continue;
    const LoraMatrix& m = g.adapter->layers[layer].at(LoraTarget::kV);
    const int64_t n = static_cast<int64_t>(g.lr_rows.size());
    const int32_t w = lr_->geometry().width;
    lr_t_.resize(n * std::max(m.rank, 1));
    if (m.rank > 0) backend_->lora_down(h_.data(), d, m.a.data(), m.rank, g.lr_rows.data(), n, lr_t_.data());
    lr_row_.assign(w, 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      if (m.rank > 0) std::copy_n(&lr_t_[i * m.rank], m.rank, lr_row_.begin());
      lr_->write_row(layer, slots_lr_[g.lr_rows[i]], lr_row_.data());
    }
  }
}

void Runner::plan_lr(const Step& step, int layer) {
  const size_t n = step.seqs.size();
  lr_b_.assign(n, nullptr);
  lr_rank_.assign(n, 0);
  lr_scale_.assign(n, 0.0f);
  for (size_t q = 0; q < n; ++q) {
    const int32_t ai = step.seq_lr[q].adapter;
    if (ai < 0) continue;
    const LoraMatrix& m = step.adapters[ai]->layers[layer].at(LoraTarget::kV);
    if (m.empty()) continue;  // no v_proj LoRA at this layer: V is the base's
    lr_b_[q] = m.b.data();
    lr_rank_[q] = m.rank;
    lr_scale_[q] = m.scale;
  }
  lr_plan_.lr = lr_->layer_base(layer);
  lr_plan_.dtype = lr_->geometry().dtype;
  lr_plan_.block_stride = lr_->block_stride();
  lr_plan_.width = lr_->geometry().width;
  lr_plan_.block_indptr = lr_indptr_.data();
  lr_plan_.block_ids = lr_ids_.data();
  lr_plan_.b = lr_b_.data();
  lr_plan_.rank = lr_rank_.data();
  lr_plan_.scale = lr_scale_.data();
  lr_plan_.path = flash_lora_ ? LrAttention::Path::kAuto : LrAttention::Path::kExpand;
  plan_.lr = &lr_plan_;
}

}  // namespace agentkv
