// Segment reuse, the engine's part (segment_reuse.h).
#include "runtime/segment_reuse.h"

#include <algorithm>

namespace agentkv {

std::vector<SegmentHit> SegmentReuse::find_hits(const SchedRequest& r, int32_t lineage_from, int32_t from,
                                                int32_t min_segment) const {
  const std::span<const int32_t> prompt(r.tokens.data(), r.n_prompt);
  const int32_t base_until = std::min(r.n_prompt, lineage_from);
  if (r.cache.keys.lineage == r.cache.base_keys.lineage || base_until <= from) {
    return kv_->find_segments(prompt, from, r.cache.keys, min_segment);
  }
  // The search stops one before its span's end: the span takes one more.
  std::vector<SegmentHit> hits =
      kv_->find_segments(prompt.first(base_until + 1), from, r.cache.base_keys, min_segment);
  const std::vector<SegmentHit> more = kv_->find_segments(prompt, base_until, r.cache.keys, min_segment);
  hits.insert(hits.end(), more.begin(), more.end());
  return hits;
}

void SegmentReuse::lookup(ReuseState& st, SchedRequest& r, int32_t lineage_from, int32_t from) const {
  if (st.looked_up) return;
  st.looked_up = true;
  st.preemptions = r.n_preemptions;
  st.reused.assign(r.n_prompt, 0);
  st.run_start.assign(r.n_prompt, -1);
  st.hits = find_hits(r, lineage_from, from, st.min_segment);
  for (const SegmentHit& h : st.hits) std::fill_n(st.reused.begin() + h.dst_pos, h.n, uint8_t{1});
  if (!st.hits.empty()) {
    r.cache.exact_tokens = std::min(r.cache.exact_tokens, st.hits.front().dst_pos);
    r.cache.approx_index_from = st.hits.back().dst_pos + st.hits.back().n;
  }
}

void SegmentReuse::queue_copies(ReuseState& st, int32_t b, int32_t e, const std::vector<int32_t>& blocks,
                                Step* step) {
  for (const SegmentHit& h : st.hits) {
    const int32_t lo = std::max(b, h.dst_pos), hi = std::min(e, h.dst_pos + h.n);
    if (lo >= hi || !st.reused[lo]) continue;
    if (!kv_->segment_hit_valid(h)) {
      std::fill_n(st.reused.begin() + h.dst_pos, h.n, uint8_t{0});
      continue;
    }
    for (int32_t p = lo; p < hi; ++p) {
      const int64_t src = int64_t{h.src.id} * bs_ + h.src_offset + (p - h.dst_pos);
      const int64_t dst = kv_slot(blocks, p, bs_);
      step->copies.push_back(KvCopy{src, dst, h.dst_pos - h.src_pos});
      captures_->copy(src, h.src.generation, dst);  // the captured state travels with the K/V
    }
    st.reused_tokens += hi - lo;
    kv_->segment_hit_used(h);
  }
  for (int32_t p = b; p < e; ++p) {
    st.run_start[p] = !st.reused[p] ? -1 : (p > 0 && st.reused[p - 1] ? st.run_start[p - 1] : p);
  }
  if (!captures_->on()) return;
  st.has_hidden.resize(st.n_prompt(), 0);
  st.influence.resize(st.n_prompt(), 0.0f);
  for (int32_t p = b; p < e; ++p) {
    if (!st.reused[p]) continue;
    const int64_t slot = kv_slot(blocks, p, bs_);
    st.has_hidden[p] = captures_->has_hidden(slot);
    st.influence[p] = captures_->influence(slot);
  }
}

ReuseChunk SegmentReuse::chunk(const ReuseState& st, int32_t cb, int32_t e) const {
  ReuseChunk c;
  c.begin = cb;
  c.n = e - cb;
  c.n_layers = n_layers_;
  c.n_prompt = st.n_prompt();
  c.block_tokens = bs_;
  c.reused = std::span<const uint8_t>(st.reused.data() + cb, c.n);
  c.run_start = std::span<const int32_t>(st.run_start.data() + cb, c.n);
  c.reused_after = e < st.n_prompt() && st.reused[e];
  if (captures_->on()) {
    c.hidden_layer = captures_->layer();
    c.has_hidden = std::span<const uint8_t>(st.has_hidden.data() + cb, c.n);
    c.influence = std::span<const float>(st.influence.data() + cb, c.n);
  }
  return c;
}

void SegmentReuse::resume_row(const ReuseState& st, int32_t from, int64_t d_model, TokenRow* row,
                              Step* step) const {
  if (from <= 0 || from != captures_->layer() || !st.has_hidden[row->pos]) return;
  const std::span<const float> h = captures_->hidden_at(row->slot);
  row->layer_begin = from;
  row->hidden_in = static_cast<int32_t>(step->hidden_in.size() / d_model);
  step->hidden_in.insert(step->hidden_in.end(), h.begin(), h.end());
}

}  // namespace agentkv
