#include "kv/segment_match.h"

#include <algorithm>
#include <optional>

namespace agentkv {
namespace {

// A whole-block hit found by the slide.
struct BlockHit {
  int32_t dst = 0;
  BlockRef src;
  int32_t src_pos = 0;
};

class Matcher {
 public:
  Matcher(const SegmentIndex& index, const BlockPool& pool, BlockHashFn hash, int32_t bs,
          const SegmentQuery& q)
      : index_(index),
        pool_(pool),
        hash_(hash),
        bs_(bs),
        q_(q),
        end_(static_cast<int32_t>(q.tokens.size()) - 1) {}

  std::vector<SegmentHit> run() const {
    std::vector<SegmentHit> out;
    const int32_t from = std::max(q_.from, 0);
    if (bs_ <= 0 || from >= end_) return out;
    std::vector<BlockHit> blocks;
    for (int32_t o = from; o + bs_ <= end_;) {
      std::optional<BlockHit> h = block_at(o, blocks.empty() ? nullptr : &blocks.back());
      if (h) {
        blocks.push_back(*h);
        o += bs_;
      } else {
        ++o;
      }
    }
    int32_t done = from;  // positions below are covered or passed over
    for (size_t i = 0; i < blocks.size();) {
      size_t j = i + 1;
      while (j < blocks.size() && blocks[j].dst == blocks[j - 1].dst + bs_) ++j;
      extend_back(blocks[i], done, &out);
      for (size_t k = i; k < j; ++k) out.push_back({blocks[k].dst, bs_, blocks[k].src, 0, blocks[k].src_pos});
      extend_forward(blocks[j - 1], j < blocks.size() ? blocks[j].dst : end_, &out);
      done = out.back().dst_pos + out.back().n;
      i = j;
    }
    return drop_short(std::move(out));
  }

 private:
  // The prefix-index key of `r` while r is the life that was indexed and was
  // written under the request's extra keys; else nullptr.
  const BlockKey* live(BlockRef r) const {
    if (r.id < 0 || !pool_.is_current(r)) return nullptr;
    const BlockKey* k = pool_.index().key_of(r.id);
    if (k == nullptr || k->extra != q_.extra || static_cast<int32_t>(k->tokens.size()) != bs_) return nullptr;
    if (q_.indexed_only && !index_.has(r.id)) return nullptr;
    return k;
  }

  // The block after `s` in its sequence, if live; *n names it.
  const BlockKey* next_key(BlockRef s, BlockRef* n) const {
    *n = index_.next_of(s.id);
    const BlockKey* k = live(*n);
    return k != nullptr && k->parent == s ? k : nullptr;
  }

  bool window_is(const BlockKey& k, int32_t o) const {
    return std::equal(k.tokens.begin(), k.tokens.end(), q_.tokens.begin() + o);
  }

  std::optional<BlockHit> block_at(int32_t o, const BlockHit* last) const {
    if (last != nullptr && last->dst + bs_ == o) {
      BlockRef n;
      const BlockKey* k = next_key(last->src, &n);
      if (k != nullptr && window_is(*k, o)) return BlockHit{o, n, last->src_pos + bs_};
    }
    const SegmentEntry* e = index_.find(hash_(kRootHash, q_.tokens.subspan(o, bs_), q_.extra));
    if (e == nullptr) return std::nullopt;
    const BlockKey* k = live(e->block);
    if (k == nullptr || !window_is(*k, o)) return std::nullopt;  // stale, other keys, or a collision
    return BlockHit{o, e->block, e->pos};
  }

  // Trailing tokens of the block before first.src, down to position lo.
  void extend_back(const BlockHit& first, int32_t lo, std::vector<SegmentHit>* out) const {
    const BlockRef prev = pool_.index().key_of(first.src.id)->parent;  // first.src is live
    const BlockKey* k = live(prev);
    if (k == nullptr) return;
    int32_t n = 0;
    while (n < bs_ && first.dst - n - 1 >= lo && k->tokens[bs_ - 1 - n] == q_.tokens[first.dst - n - 1]) ++n;
    if (n > 0) out->push_back({first.dst - n, n, prev, bs_ - n, first.src_pos - n});
  }

  // Leading tokens of the block after last.src, up to position hi.
  void extend_forward(const BlockHit& last, int32_t hi, std::vector<SegmentHit>* out) const {
    BlockRef next;
    const BlockKey* k = next_key(last.src, &next);
    if (k == nullptr) return;
    const int32_t at = last.dst + bs_;
    int32_t n = 0;
    while (n < bs_ && at + n < hi && k->tokens[n] == q_.tokens[at + n]) ++n;
    if (n > 0) out->push_back({at, n, next, 0, last.src_pos + bs_});
  }

  std::vector<SegmentHit> drop_short(std::vector<SegmentHit> hits) const {
    std::vector<SegmentHit> kept;
    for (size_t i = 0; i < hits.size();) {
      size_t j = i;
      int32_t n = 0;
      do {
        n += hits[j].n;
        ++j;
      } while (j < hits.size() && hits[j].dst_pos == hits[j - 1].dst_pos + hits[j - 1].n);
      if (n >= q_.min_tokens) kept.insert(kept.end(), hits.begin() + i, hits.begin() + j);
      i = j;
    }
    return kept;
  }

  const SegmentIndex& index_;
  const BlockPool& pool_;
  BlockHashFn hash_;
  int32_t bs_;
  const SegmentQuery& q_;
  int32_t end_;  // one past the last position a hit may cover
};

}  // namespace

std::vector<SegmentHit> match_segments(const SegmentIndex& index, const BlockPool& pool, BlockHashFn hash,
                                       int32_t block_size, const SegmentQuery& query) {
  return Matcher(index, pool, hash, block_size, query).run();
}

}  // namespace agentkv
