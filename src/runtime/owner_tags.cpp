// Owner tags (owner_tags.h).
#include "runtime/owner_tags.h"

#include <cstring>

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

int32_t OwnerTags::tag(const Adapter* a) {
  if (a == nullptr) return 0;
  auto [it, fresh] = ids_.try_emplace(a->id, static_cast<int32_t>(ids_.size()) + 1);
  (void)fresh;
  return it->second;
}

void OwnerTags::add_redo_rows(const ChunkSpan& span, SeqPlanner& plan, const std::vector<int32_t>& tokens,
                              int32_t adapter_index, const std::vector<int32_t>& blocks, Step* step) {
  // Only a request with redo layers gets an agent tag (tag() assigns one on first use).
  const SeqSharing& sharing = plan.sharing();
  if (tags_ == nullptr || sharing.redo_layers.empty() || sharing.adapter == nullptr) return;
  const uint32_t bit = uint32_t{1} << (tag(sharing.adapter) % 32);
  std::vector<RowSpec> specs;
  plan.redo_rows(
      span,
      [&](int32_t p) {
        const int64_t slot = kv_slot(blocks, p, bs_);
        return (processed_by(tags_->read(slot, kv_->slot_generation(slot))) & bit) != 0;
      },
      &specs);
  if (specs.empty()) return;
  const bool snaps = snapshots(sharing);
  const int32_t mask = static_cast<int32_t>(step->write_masks.size());
  std::vector<uint8_t> m(n_layers_, 0);
  for (int32_t layer : sharing.redo_layers) m[layer] = 1;
  step->write_masks.push_back(std::move(m));
  for (const RowSpec& rs : specs) {
    const int32_t p = rs.index;
    const int64_t slot = kv_slot(blocks, p, bs_);
    TokenRow row;
    row.token = tokens[p];
    row.pos = p;
    row.slot = slot;
    row.adapter = adapter_index;
    row.write_mask = mask;
    row.layer_end = sharing.redo_layers.back() + 1;
    // From the snapshot at the first critical layer where one is kept (the
    // state of the agent that processed the token), else from layer 0,
    // keeping a snapshot on the way.
    const std::span<const float> h =
        snaps ? hidden_->read(slot, kv_->slot_generation(slot)) : std::span<const float>();
    if (!h.empty()) {
      row.layer_begin = layer_;
      row.hidden_in = static_cast<int32_t>(step->hidden_in.size() / d_);
      step->hidden_in.insert(step->hidden_in.end(), h.begin(), h.end());
    } else if (snaps) {
      row.capture_layer = layer_;
    }
    step->rows.push_back(row);
  }
}

void OwnerTags::store(const Step& step, const std::function<const SeqSharing*(size_t)>& sharing_of) {
  if (tags_ == nullptr) return;
  for (size_t q = 0; q < step.seqs.size(); ++q) {
    const SeqSharing* s = sharing_of(q);
    if (s == nullptr || s->redo_layers.empty()) continue;
    const uint32_t bit = uint32_t{1} << (tag(s->adapter) % 32);
    const StepSeq& sq = step.seqs[q];
    for (int32_t i = sq.row_begin; i < sq.row_end; ++i) {
      const TokenRow& row = step.rows[i];
      if (row.slot < 0 || row.adapter < 0) continue;
      const uint32_t gen = kv_->slot_generation(row.slot);
      // A recompute row adds the agent to those that processed the token; a
      // row of new K/V (all layers) makes it the only one.
      const uint32_t before = row.write_mask >= 0 ? processed_by(tags_->read(row.slot, gen)) : 0;
      set_processed(tags_->write(row.slot, gen), before | bit);
    }
  }
}

}  // namespace agentkv
