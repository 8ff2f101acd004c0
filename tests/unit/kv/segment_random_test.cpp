// find_segments on random layouts against a closed-form oracle. Documents of
// tokens that occur nowhere else are cached once each, at a random source
// offset, partly as prompt and partly as generated tokens; a new prompt
// strings random fragments of them between filler. No window of that prompt
// equals a cached block except where it lines up with a document's source
// blocks, so the coverage is known: a stretch of the prompt that repeats
// consecutive document tokens is covered in full (clipped to [from, T-1) and
// to the committed part of its source) iff it contains one whole source block;
// then groups shorter than min_tokens go.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kv/kv_manager.h"

namespace agentkv {
namespace {

struct Doc {
  int32_t first = 0;  // tokens first .. first + len - 1
  int32_t len = 0;
  int32_t src_start = 0;        // source position of the doc's first token
  int32_t committed = 0;        // source positions below are in committed blocks
  std::vector<int32_t> source;  // the whole source sequence
  std::vector<int32_t> table;
};

struct Origin {
  int32_t doc = -1;
  int32_t t = 0;  // index in the doc
};

struct Src {
  int32_t block = -1;
  int32_t offset = 0;
  int32_t pos = 0;
  bool operator==(const Src&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Src& s) {
  return os << "{block " << s.block << " offset " << s.offset << " pos " << s.pos << "}";
}

// Empty when equal, else the positions that differ.
std::string diff(const std::vector<Src>& got, const std::vector<Src>& want) {
  std::ostringstream os;
  for (size_t p = 0; p < std::max(got.size(), want.size()); ++p) {
    const Src g = p < got.size() ? got[p] : Src{}, w = p < want.size() ? want[p] : Src{};
    if (!(g == w)) os << "position " << p << ": got " << g << ", want " << w << "\n";
  }
  return os.str();
}

uint64_t weak_hash(uint64_t parent, std::span<const int32_t> tokens, std::string_view extra) {
  return hash_block(parent, tokens, extra) & 0xf;
}

class Layout {
 public:
  Layout(int32_t bs, uint32_t seed, BlockHashFn hash) : bs_(bs), kv_(512, bs, hash), rng_(seed) {
    for (int32_t d = 0; d < 6; ++d) cache_doc(d);
  }

  // One random prompt; checks the hits against the oracle (exact) or, when
  // the hash collides at will, only that every hit is true KV.
  void probe(bool exact) {
    std::vector<int32_t> prompt;
    std::vector<Origin> origin;
    for (int32_t n = pick(1, 8); n > 0; --n) {
      if (pick(0, 2) == 0) {
        for (int32_t k = pick(0, 2 * bs_); k > 0; --k) {
          prompt.push_back(next_filler_++);
          origin.push_back({});
        }
      } else {
        const int32_t d = pick(0, static_cast<int32_t>(docs_.size()) - 1);
        const int32_t a = pick(0, docs_[d].len - 1), b = pick(a + 1, docs_[d].len);
        for (int32_t t = a; t < b; ++t) {
          prompt.push_back(docs_[d].first + t);
          origin.push_back({d, t});
        }
      }
    }
    const int32_t T = static_cast<int32_t>(prompt.size());
    const int32_t from = pick(0, T / 3);
    const int32_t min_tokens = bs_ * pick(0, 3);
    const std::vector<SegmentHit> hits = kv_.find_segments(prompt, from, {}, min_tokens);
    const std::vector<Src> got = expand(hits, prompt, from);
    for (const SegmentHit& h : hits) n_hit_tokens_ += h.n;
    if (exact) {
      ASSERT_EQ(diff(got, oracle(origin, from, min_tokens)), "");
    }
  }

  int64_t n_hit_tokens() const { return n_hit_tokens_; }

 private:
  int32_t pick(int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng_); }

  void cache_doc(int32_t d) {
    Doc doc;
    doc.first = 1000 * (d + 1);
    doc.len = pick(1, 6 * bs_);
    doc.src_start = pick(0, 2 * bs_);
    for (int32_t k = 0; k < doc.src_start; ++k) doc.source.push_back(next_filler_++);
    for (int32_t t = 0; t < doc.len; ++t) doc.source.push_back(doc.first + t);
    for (int32_t k = pick(0, bs_); k > 0; --k) doc.source.push_back(next_filler_++);
    const RequestId id = d + 1;
    const int32_t total = static_cast<int32_t>(doc.source.size());
    const int32_t n_prompt = pick(1, total);  // the rest is "generated", one token at a time
    ASSERT_TRUE(kv_.allocate_slots(id, n_prompt).is_ok());
    kv_.commit_full_blocks(id, std::span(doc.source).first(n_prompt), {});
    for (int32_t n = n_prompt + 1; n <= total; ++n) {
      ASSERT_TRUE(kv_.allocate_slots(id, 1).is_ok());
      kv_.commit_full_blocks(id, std::span(doc.source).first(n), {});
    }
    doc.committed = total / bs_ * bs_;
    doc.table = kv_.block_table(id);
    for (size_t i = 0; i < doc.table.size(); ++i) block_home_[doc.table[i]] = {d, static_cast<int32_t>(i)};
    if (pick(0, 1) == 0) kv_.free(id);  // cached or still held: both are sources
    docs_.push_back(std::move(doc));
  }

  // Per prompt position, after checking each hit against what its source
  // block really holds.
  std::vector<Src> expand(const std::vector<SegmentHit>& hits, const std::vector<int32_t>& prompt,
                          int32_t from) {
    std::vector<Src> out(prompt.size());
    int32_t end = from;
    for (const SegmentHit& h : hits) {
      EXPECT_GT(h.n, 0);
      EXPECT_GE(h.dst_pos, end) << "unsorted, overlapping, or inside the prefix";
      EXPECT_LE(h.dst_pos + h.n, static_cast<int32_t>(prompt.size()) - 1) << "covers the last token";
      EXPECT_TRUE(h.src_offset >= 0 && h.src_offset + h.n <= bs_) << "leaves its block";
      EXPECT_TRUE(kv_.segment_hit_valid(h));
      auto home = block_home_.find(h.src.id);
      if (home == block_home_.end()) {
        ADD_FAILURE() << "block " << h.src.id << " holds no document";
        continue;
      }
      const auto [d, i] = home->second;
      EXPECT_EQ(h.src_pos, i * bs_ + h.src_offset);
      for (int32_t j = 0; j < h.n; ++j) {
        EXPECT_EQ(docs_[d].source.at(h.src_pos + j), prompt[h.dst_pos + j]) << "wrong KV served";
        out[h.dst_pos + j] = {h.src.id, h.src_offset + j, h.src_pos + j};
      }
      end = h.dst_pos + h.n;
    }
    return out;
  }

  std::vector<Src> oracle(const std::vector<Origin>& origin, int32_t from, int32_t min_tokens) const {
    const int32_t T = static_cast<int32_t>(origin.size());
    std::vector<Src> want(T);
    const auto src_pos = [&](int32_t p) { return docs_[origin[p].doc].src_start + origin[p].t; };
    for (int32_t p0 = 0; p0 < T;) {
      int32_t p1 = p0 + 1;
      while (p1 < T && origin[p0].doc >= 0 && origin[p1].doc == origin[p0].doc &&
             origin[p1].t == origin[p1 - 1].t + 1)
        ++p1;
      if (origin[p0].doc >= 0) {
        const Doc& doc = docs_[origin[p0].doc];
        int32_t q0 = std::max(p0, from), q1 = std::min(p1, T - 1);
        while (q1 > q0 && src_pos(q1 - 1) >= doc.committed) --q1;
        if (q1 > q0) {
          const int32_t s0 = src_pos(q0), s1 = src_pos(q1 - 1) + 1;
          const int32_t first_block = (s0 + bs_ - 1) / bs_ * bs_;
          if (first_block + bs_ <= s1) {
            for (int32_t p = q0; p < q1; ++p) {
              const int32_t s = src_pos(p);
              want[p] = {doc.table[s / bs_], s % bs_, s};
            }
          }
        }
      }
      p0 = p1;
    }
    for (int32_t p0 = 0; p0 < T;) {  // min_tokens, per contiguous covered group
      if (want[p0].block < 0) {
        ++p0;
        continue;
      }
      int32_t p1 = p0;
      while (p1 < T && want[p1].block >= 0) ++p1;
      if (p1 - p0 < min_tokens) std::fill(want.begin() + p0, want.begin() + p1, Src{});
      p0 = p1;
    }
    return want;
  }

  int32_t bs_;
  KvManager kv_;
  std::mt19937 rng_;
  std::vector<Doc> docs_;
  std::map<int32_t, std::pair<int32_t, int32_t>> block_home_;  // block -> (doc, index in its table)
  int32_t next_filler_ = 1'000'000;
  int64_t n_hit_tokens_ = 0;
};

TEST(SegmentRandom, MatchesTheOracle) {
  for (int32_t bs : {1, 3, 4, 16}) {
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      Layout layout(bs, seed, hash_block);
      for (int i = 0; i < 50; ++i) {
        layout.probe(true);
        if (::testing::Test::HasFatalFailure()) {
          FAIL() << "bs " << bs << " seed " << seed << " probe " << i;
        }
      }
      EXPECT_GT(layout.n_hit_tokens(), 0) << "bs " << bs << " seed " << seed;
    }
  }
}

TEST(SegmentRandom, CollidingHashNeverServesWrongKv) {
  for (int32_t bs : {1, 4, 16}) {
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      Layout layout(bs, seed, weak_hash);
      for (int i = 0; i < 50; ++i) {
        layout.probe(false);
        if (::testing::Test::HasFatalFailure()) FAIL() << "bs " << bs << " seed " << seed;
      }
    }
  }
}

}  // namespace
}  // namespace agentkv
