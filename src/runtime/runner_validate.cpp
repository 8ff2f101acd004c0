// The runner's checks of a Step before it runs (runner.h): rows, slots,
// adapters, hooks, write masks and LR slots within their bounds, so a
// malformed Step is an error and never an out-of-bounds access.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/runner.h"

namespace agentkv {

Status Runner::validate_adapter(const Adapter& a) const {
  const ModelSpec& s = model_->spec;
  if (static_cast<int64_t>(a.layers.size()) != s.n_layers) {
    return make_error(ErrorCode::kInvalidArgument, "adapter '", a.name, "' has ", a.layers.size(),
                      " layers, the model has ", s.n_layers);
  }
  // (d_in, d_out) of each target, in LoraTarget order.
  const int64_t dims[kLoraTargetCount][2] = {
      {s.d_model, s.q_dim()}, {s.d_model, s.kv_dim()}, {s.d_model, s.kv_dim()}, {s.q_dim(), s.d_model},
      {s.d_model, s.ffn_dim}, {s.d_model, s.ffn_dim},  {s.ffn_dim, s.d_model}};
  static const char* const names[kLoraTargetCount] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                      "gate_proj", "up_proj", "down_proj"};
  for (size_t l = 0; l < a.layers.size(); ++l) {
    for (int32_t t = 0; t < kLoraTargetCount; ++t) {
      const LoraMatrix& m = a.layers[l].m[t];
      if (m.rank == 0) continue;
      const int64_t r = m.rank;
      if (r < 0 || m.d_in != dims[t][0] || m.d_out != dims[t][1] ||
          static_cast<int64_t>(m.a.size()) != r * m.d_in || static_cast<int64_t>(m.b.size()) != m.d_out * r) {
        return make_error(ErrorCode::kInvalidArgument, "adapter '", a.name, "' layer ", l, " ", names[t],
                          ": rank ", m.rank, ", ", m.d_in, " -> ", m.d_out, " with A of ", m.a.size(),
                          " and B of ", m.b.size(), " floats does not fit the model's ", dims[t][0], " -> ",
                          dims[t][1]);
      }
    }
  }
  return Status::ok();
}

Status Runner::validate(const Step& step) const {
  const ModelSpec& s = model_->spec;
  for (size_t i = 0; i < step.adapters.size(); ++i) {
    if (step.adapters[i] == nullptr)
      return make_error(ErrorCode::kInvalidArgument, "step adapter ", i, " is null");
    AKV_RETURN_IF_ERROR(validate_adapter(*step.adapters[i]));
  }
  AKV_RETURN_IF_ERROR(validate_seqs(step));
  for (const TokenRow& row : step.rows) AKV_RETURN_IF_ERROR(validate_row(step, row));
  for (const std::vector<uint8_t>& m : step.write_masks) {
    if (static_cast<int64_t>(m.size()) != s.n_layers)
      return make_error(ErrorCode::kInternal, "a write mask must cover every layer");
  }
  AKV_RETURN_IF_ERROR(validate_lr(step));
  if (step.hidden_in.size() % s.d_model != 0)
    return make_error(ErrorCode::kInternal, "hidden_in is not whole rows");
  return validate_hooks_and_copies(step);
}

// The sequences cover the rows contiguously, with their blocks in range and
// each row's position and slot inside its block table.
Status Runner::validate_seqs(const Step& step) const {
  const KvGeometry& g = kv_->geometry();
  const int64_t n_rows = static_cast<int64_t>(step.rows.size());
  int32_t expect_begin = 0;
  for (const StepSeq& q : step.seqs) {
    if (q.row_begin != expect_begin || q.row_end < q.row_begin || q.row_end > n_rows) {
      return make_error(ErrorCode::kInternal, "step sequences must cover the rows contiguously");
    }
    expect_begin = q.row_end;
    for (int32_t b : q.blocks) {
      if (b < 0 || b >= kv_->n_blocks())
        return make_error(ErrorCode::kInternal, "block id ", b, " out of range");
    }
    const int64_t capacity = static_cast<int64_t>(q.blocks.size()) * g.block_size;
    for (int32_t r = q.row_begin; r < q.row_end; ++r) {
      const TokenRow& row = step.rows[r];
      if (row.pos < 0 || row.pos >= capacity) {
        return make_error(ErrorCode::kInternal, "row position ", row.pos, " outside its block table");
      }
      // The row's own K/V must land where attention will read position pos;
      // a negative slot writes nothing (the K/V at pos comes from another row).
      const int64_t want = kv_slot(q.blocks, row.pos, g.block_size);
      if (row.slot >= 0 && row.slot != want) {
        return make_error(ErrorCode::kInternal, "row slot does not match its block table");
      }
    }
  }
  if (expect_begin != n_rows) return make_error(ErrorCode::kInternal, "rows not covered by step sequences");
  return Status::ok();
}

// One row's token, adapter, layer range, injected state, capture and mask.
Status Runner::validate_row(const Step& step, const TokenRow& row) const {
  const ModelSpec& s = model_->spec;
  if (row.token < 0 || row.token >= s.n_vocab) {
    return make_error(ErrorCode::kInvalidArgument, "token id ", row.token, " outside the vocabulary (",
                      s.n_vocab, ")");
  }
  if (row.adapter < -1 || row.adapter >= static_cast<int64_t>(step.adapters.size())) {
    return make_error(ErrorCode::kInvalidArgument, "row adapter index ", row.adapter, " outside the step's ",
                      step.adapters.size(), " adapters");
  }
  const int32_t end = row.layer_end == kAllLayers ? s.n_layers : row.layer_end;
  if (row.layer_begin < 0 || row.layer_begin >= s.n_layers || end <= row.layer_begin || end > s.n_layers) {
    return make_error(ErrorCode::kInternal, "row layers [", row.layer_begin, ", ", row.layer_end,
                      ") are not a non-empty range of the model's ", s.n_layers);
  }
  if (row.logits && end != s.n_layers)
    return make_error(ErrorCode::kInternal, "a row with logits must reach the last layer");
  const int64_t n_hidden = static_cast<int64_t>(step.hidden_in.size()) / s.d_model;
  if (row.layer_begin > 0 ? (row.hidden_in < 0 || row.hidden_in >= n_hidden) : row.hidden_in != -1) {
    return make_error(
        ErrorCode::kInternal, "a row starting at layer ", row.layer_begin,
        row.layer_begin > 0 ? " needs an injected hidden state" : " takes no injected hidden state");
  }
  if (row.capture_layer != -1 &&
      (row.capture_layer < row.layer_begin || row.capture_layer > end || row.capture_layer >= s.n_layers)) {
    return make_error(ErrorCode::kInternal, "capture layer ", row.capture_layer,
                      " outside the row's layers and the one it stops at");
  }
  if (row.write_mask < -1 || row.write_mask >= static_cast<int64_t>(step.write_masks.size())) {
    return make_error(ErrorCode::kInternal, "row write mask ", row.write_mask, " outside the step's masks");
  }
  return Status::ok();
}

Status Runner::validate_hooks_and_copies(const Step& step) const {
  const ModelSpec& s = model_->spec;
  const KvGeometry& g = kv_->geometry();
  for (const LayerHook& h : step.hooks) {
    if (h.seq < 0 || h.seq >= static_cast<int64_t>(step.seqs.size()) || h.layer < 0 ||
        h.layer >= s.n_layers || !h.fn) {
      return make_error(ErrorCode::kInternal, "hook at sequence ", h.seq, " layer ", h.layer,
                        " is malformed");
    }
    const StepSeq& q = step.seqs[h.seq];
    for (int32_t r : h.colsum_rows) {
      if (r < q.row_begin || r >= q.row_end)
        return make_error(ErrorCode::kInternal, "colsum row outside the hook's sequence");
    }
    if (!std::is_sorted(h.colsum_rows.begin(), h.colsum_rows.end())) {
      return make_error(ErrorCode::kInternal, "colsum rows must be ascending");
    }
  }
  const int64_t n_slots = kv_->n_blocks() * g.block_size;
  for (const KvCopy& c : step.copies) {
    if (c.src_slot < 0 || c.src_slot >= n_slots || c.dst_slot < 0 || c.dst_slot >= n_slots ||
        c.src_slot == c.dst_slot) {
      return make_error(ErrorCode::kInternal, "KV copy slots ", c.src_slot, " -> ", c.dst_slot,
                        " out of range");
    }
  }
  return Status::ok();
}

Status Runner::validate_lr(const Step& step) const {
  const int32_t bs = kv_->geometry().block_size;
  if (!step.seq_lr.empty() && step.seq_lr.size() != step.seqs.size()) {
    return make_error(ErrorCode::kInternal, "seq_lr must be empty or one per sequence");
  }
  for (size_t qi = 0; qi < step.seqs.size(); ++qi) {
    const StepSeq& q = step.seqs[qi];
    static const StepSeqLr kNone;
    const StepSeqLr& ql = step.seq_lr.empty() ? kNone : step.seq_lr[qi];
    if (ql.adapter == -1) {
      for (int32_t r = q.row_begin; r < q.row_end; ++r) {
        if (step.rows[r].lr_slot != -1)
          return make_error(ErrorCode::kInternal, "an LR slot outside an LR sequence");
      }
      continue;
    }
    if (lr_ == nullptr)
      return make_error(ErrorCode::kInvalidArgument, "the step reads an LR cache the runner has none of");
    if (ql.adapter < 0 || ql.adapter >= static_cast<int64_t>(step.adapters.size())) {
      return make_error(ErrorCode::kInternal, "LR adapter index ", ql.adapter,
                        " outside the step's adapters");
    }
    const Adapter& a = *step.adapters[ql.adapter];
    for (const LoraLayer& l : a.layers) {
      if (l.at(LoraTarget::kV).rank > lr_->geometry().width) {
        return make_error(ErrorCode::kInvalidArgument, "adapter '", a.name, "' has v_proj rank ",
                          l.at(LoraTarget::kV).rank, ", above the LR cache's ", lr_->geometry().width);
      }
    }
    for (int32_t b : ql.blocks) {
      if (b < 0 || b >= lr_->n_blocks())
        return make_error(ErrorCode::kInternal, "LR block id ", b, " out of range");
    }
    for (int32_t r = q.row_begin; r < q.row_end; ++r) {
      const TokenRow& row = step.rows[r];
      // Attention of a row at p reads V_lr of keys 0..p: the LR table must reach it.
      if (row.pos / bs >= static_cast<int64_t>(ql.blocks.size())) {
        return make_error(ErrorCode::kInternal, "row position ", row.pos, " beyond its LR block table");
      }
      if (row.lr_slot == -1) continue;
      const int64_t want = kv_slot(ql.blocks, row.pos, bs);
      if (row.lr_slot != want || row.adapter != ql.adapter) {
        return make_error(ErrorCode::kInternal, "row LR slot does not match its LR block table or adapter");
      }
    }
  }
  return Status::ok();
}

}  // namespace agentkv
