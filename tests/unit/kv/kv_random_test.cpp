// Randomized test of KvManager against a model of what each block physically
// holds: the test plays the runner, recording the (keys, token prefix) whose
// KV it "wrote" into each block. Whatever the manager serves as a prefix hit
// must be exactly that content; refcounts and the free/cached/used partition
// must match the tables the test holds. Run with the real hash and with a
// 4-bit hash that collides all the time.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kv/kv_manager.h"

namespace agentkv {
namespace {

constexpr int32_t kBs = 4;
constexpr int32_t kBlocks = 24;

struct Content {
  std::string keys;             // ExtraKeys::serialize()
  std::vector<int32_t> prefix;  // every token up to the end of the block
  bool operator==(const Content&) const = default;
};

struct Req {
  std::vector<int32_t> tokens;  // computed so far
  ExtraKeys keys;
};

uint64_t weak_hash(uint64_t parent, std::span<const int32_t> tokens, std::string_view extra) {
  return hash_block(parent, tokens, extra) & 0xf;
}

// Ignores the parent: equal blocks under different prefixes always collide,
// so only the parent check in the index keeps their KV apart.
uint64_t parentless_hash(uint64_t, std::span<const int32_t> tokens, std::string_view extra) {
  return hash_block(kRootHash, tokens, extra) & 0xff;
}

class Sim {
 public:
  Sim(BlockHashFn fn, uint32_t seed) : kv_(kBlocks, kBs, fn), rng_(seed), contents_(kBlocks) {
    for (int i = 0; i < 4; ++i) {  // shared prompt stems, so prefixes recur
      std::vector<int32_t> s(static_cast<size_t>(pick(0, 14)));
      for (auto& t : s) t = pick(0, 3);
      stems_.push_back(s);
    }
  }

  void run(int n_ops) {
    for (int op = 0; op < n_ops; ++op) {
      const int what = pick(0, 9);
      if (what < 4 || reqs_.empty()) {
        start();
      } else if (what < 8) {
        decode();
      } else {
        finish();
      }
      check_invariants();
      if (::testing::Test::HasFatalFailure()) return;
    }
    EXPECT_GT(hits_, 0);  // the test exercised sharing at all
    EXPECT_GT(segment_hits_, 0);
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  ExtraKeys random_keys() {
    static const char* kTenants[] = {"", "t1"};
    static const char* kLineages[] = {"", "adapterA"};
    return ExtraKeys{kLineages[pick(0, 1)], kTenants[pick(0, 1)], ""};
  }

  void start() {
    Req r;
    r.keys = random_keys();
    r.tokens = stems_[pick(0, 3)];
    for (int n = pick(1, 6); n > 0; --n) r.tokens.push_back(pick(0, 3));
    const RequestId id = next_id_++;
    KvBlocks hit = kv_.get_computed_blocks(r.tokens, r.keys);
    check_segments(r, hit.n_tokens());
    if (pick(0, 4) == 0 && !reqs_.empty()) decode();  // may evict what `hit` names
    const KvUsage before = kv_.usage();
    Status st = kv_.allocate_slots(id, static_cast<int32_t>(r.tokens.size()) - hit.n_tokens(), hit);
    if (!st.is_ok()) {
      ASSERT_TRUE(st.code() == ErrorCode::kResourceExhausted || st.code() == ErrorCode::kInvalidArgument)
          << st.message();
      ASSERT_FALSE(kv_.has_request(id));
      const KvUsage after = kv_.usage();
      ASSERT_EQ(after.n_used, before.n_used);
      ASSERT_EQ(after.n_cached, before.n_cached);
      return;
    }
    const auto& table = kv_.block_table(id);
    const std::string keys = r.keys.serialize();
    for (int32_t i = 0; i < hit.n_blocks(); ++i) {  // the served prefix is what was written
      ASSERT_TRUE(contents_[table[i]].has_value());
      ASSERT_EQ(*contents_[table[i]], (Content{keys, prefix(r.tokens, i)}));
    }
    hits_ += hit.n_blocks();
    for (size_t i = hit.n_blocks(); i < table.size(); ++i) contents_[table[i]].reset();  // fresh: garbage
    write_full_blocks(id, r);
    kv_.commit_full_blocks(id, r.tokens, r.keys);
    reqs_[id] = std::move(r);
  }

  void decode() {
    auto it = std::next(reqs_.begin(), pick(0, static_cast<int>(reqs_.size()) - 1));
    const RequestId id = it->first;
    const size_t old_size = kv_.block_table(id).size();
    if (!kv_.allocate_slots(id, 1).is_ok()) {
      ASSERT_EQ(kv_.block_table(id).size(), old_size);
      finish_one(it);  // preempt: a real scheduler would recompute it later
      return;
    }
    const auto& table = kv_.block_table(id);
    for (size_t i = old_size; i < table.size(); ++i) contents_[table[i]].reset();
    it->second.tokens.push_back(pick(0, 3));
    write_full_blocks(id, it->second);
    kv_.commit_full_blocks(id, it->second.tokens, it->second.keys);
  }

  void finish() {
    auto it = std::next(reqs_.begin(), pick(0, static_cast<int>(reqs_.size()) - 1));
    finish_one(it);
  }

  void finish_one(std::map<RequestId, Req>::iterator it) {
    kv_.free(it->first);
    reqs_.erase(it);
  }

  static std::vector<int32_t> prefix(const std::vector<int32_t>& tokens, int32_t block) {
    return std::vector<int32_t>(tokens.begin(), tokens.begin() + (block + 1) * kBs);
  }

  // The runner's part: KV of every full block of the request is now written.
  // A block shared with another request already holds the same content.
  void write_full_blocks(RequestId id, const Req& r) {
    const auto& table = kv_.block_table(id);
    const std::string keys = r.keys.serialize();
    const int32_t n_full = static_cast<int32_t>(r.tokens.size()) / kBs;
    for (int32_t i = 0; i < n_full; ++i) {
      Content c{keys, prefix(r.tokens, i)};
      if (contents_[table[i]].has_value()) {
        ASSERT_EQ(*contents_[table[i]], c) << "a shared block would be overwritten";
      }
      contents_[table[i]] = std::move(c);
    }
  }

  // Every segment hit names KV the "runner" really wrote: the same keys, and
  // the prompt's tokens at the positions the hit claims.
  void check_segments(const Req& r, int32_t from) {
    const std::string keys = r.keys.serialize();
    for (const SegmentHit& h : kv_.find_segments(r.tokens, from, r.keys, 0)) {
      ASSERT_GE(h.dst_pos, from);
      ASSERT_LT(h.dst_pos + h.n, static_cast<int32_t>(r.tokens.size()));
      ASSERT_TRUE(kv_.segment_hit_valid(h));
      const std::optional<Content>& c = contents_[h.src.id];
      ASSERT_TRUE(c.has_value()) << "segment hit on block " << h.src.id << " that holds nothing";
      ASSERT_EQ(c->keys, keys);
      ASSERT_EQ(static_cast<int32_t>(c->prefix.size()), h.src_pos - h.src_offset + kBs)
          << "wrong source position";
      for (int32_t j = 0; j < h.n; ++j) ASSERT_EQ(c->prefix[h.src_pos + j], r.tokens[h.dst_pos + j]);
      segment_hits_ += h.n;
    }
  }

  void check_invariants() {
    const BlockPool& pool = kv_.pool();
    std::vector<int32_t> refs(kBlocks, 0);
    for (const auto& [id, r] : reqs_) {
      for (int32_t b : kv_.block_table(id)) ++refs[b];
      ASSERT_EQ(kv_.num_slots(id), static_cast<int32_t>(r.tokens.size()));
    }
    const std::vector<int32_t> lru = pool.lru_order();
    const std::set<int32_t> in_lru(lru.begin(), lru.end());
    ASSERT_EQ(in_lru.size(), lru.size());
    int32_t n_used = 0, n_cached = 0, n_free = 0;
    for (int32_t b = 0; b < kBlocks; ++b) {
      ASSERT_EQ(pool.meta(b).ref, refs[b]) << "block " << b;
      const bool indexed = pool.index().contains(b);
      if (refs[b] > 0) {
        ++n_used;
        ASSERT_FALSE(in_lru.count(b));
      } else if (indexed) {
        ++n_cached;
        ASSERT_TRUE(in_lru.count(b));
      } else {
        ++n_free;
        ASSERT_FALSE(in_lru.count(b));
      }
      if (indexed) {  // the index describes what the block really holds
        const BlockKey* key = pool.index().key_of(b);
        ASSERT_TRUE(contents_[b].has_value()) << "indexed block " << b << " holds no content";
        ASSERT_EQ(key->extra, contents_[b]->keys);
        ASSERT_EQ(key->tokens,
                  std::vector<int32_t>(contents_[b]->prefix.end() - kBs, contents_[b]->prefix.end()));
      }
    }
    const KvUsage u = kv_.usage();
    ASSERT_EQ(u.n_used, n_used);
    ASSERT_EQ(u.n_cached, n_cached);
    ASSERT_EQ(u.n_free, n_free);
    ASSERT_EQ(u.n_total, kBlocks);
    ASSERT_LE(kv_.segments().size(), kBlocks);
  }

  KvManager kv_;
  std::mt19937 rng_;
  std::vector<std::optional<Content>> contents_;  // per block: what the "runner" wrote
  std::vector<std::vector<int32_t>> stems_;
  std::map<RequestId, Req> reqs_;
  RequestId next_id_ = 1;
  int64_t hits_ = 0;
  int64_t segment_hits_ = 0;
};

TEST(KvRandom, MatchesTheContentModelWithTheRealHash) {
  for (uint32_t seed = 1; seed <= 2; ++seed) {
    Sim sim(hash_block, seed);
    sim.run(5000);
  }
}

TEST(KvRandom, MatchesTheContentModelUnderConstantCollisions) {
  for (uint32_t seed = 1; seed <= 2; ++seed) {
    Sim sim(weak_hash, seed);
    sim.run(5000);
  }
}

}  // namespace
}  // namespace agentkv

namespace agentkv {
namespace {

TEST(KvRandom, MatchesTheContentModelWhenParentsCollide) {
  for (uint32_t seed = 1; seed <= 2; ++seed) {
    Sim sim(parentless_hash, seed);
    sim.run(5000);
  }
}

}  // namespace
}  // namespace agentkv
