#include "sharing/planner.h"

namespace agentkv {

void sharing_rows(const SeqSharing& s, int32_t begin, int32_t n, bool sample, std::vector<RowSpec>* out) {
  for (int32_t i = begin; i < begin + n; ++i) {
    const bool last = sample && i == begin + n - 1;
    out->push_back(RowSpec{i, i >= s.weights_from, true, last && !s.decoder_row});
    if (last && s.decoder_row) out->push_back(RowSpec{i, true, false, true});
  }
}

void SeqPlanner::chunk_rows(const ChunkSpan& c, std::vector<RowSpec>* out) const {
  const size_t first = out->size();
  sharing_rows(sharing_, c.begin, c.n, c.sample, out);
  if (sharing_.lr_lineage.empty()) return;
  for (size_t i = first; i < out->size(); ++i) {
    RowSpec& r = (*out)[i];
    if (!r.adapter || !r.write_kv) continue;
    r.write_lr = true;
    if (r.index < c.kv_hit_tokens) r.write_kv = false;  // the base K/V is cached: keep it
  }
}

bool SeqPlanner::redo_due(const ChunkSpan& c) {
  if (sharing_.redo_layers.empty() || sharing_.adapter == nullptr) return false;
  // Once per admission, at its first chunk: the cached prefix is [0, begin).
  if (redo_admission_ == c.admission || c.begin != c.kv_hit_tokens || c.begin == 0) return false;
  redo_admission_ = c.admission;
  return true;
}

CacheKeyPolicy SeqPlanner::cache_policy(const ExtraKeys& own, int32_t block_size) const {
  CacheKeyPolicy c;
  c.base_keys = own;
  c.keys = own;
  if (sharing_.lineage_from != kNever) {
    c.keys.lineage = sharing_.adapter->id;
    c.base_blocks = sharing_.lineage_from / block_size;  // blocks ending at or before lineage_from
  }
  if (!sharing_.shared_lineage.empty()) {
    // Adapter ids are hex, so a "shared:" tag never aliases one.
    c.keys.lineage = "shared:" + sharing_.shared_lineage;
    c.base_blocks = 0;
  }
  if (!sharing_.lr_lineage.empty()) {
    c.pool_keys = own;
    c.pool_keys->lineage = sharing_.lr_lineage;
  }
  return c;
}

}  // namespace agentkv
