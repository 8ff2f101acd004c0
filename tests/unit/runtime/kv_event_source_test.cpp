// KvEventSource on a real KvManager: what a router would learn from the
// events equals what the prefix index holds, under every name that reads it.
#include "runtime/kv_event_source.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kv/kv_manager.h"

namespace agentkv {
namespace {

constexpr int32_t kBs = 4;

// A subscriber's view: hash -> (name, parent, tokens), replayed from batches.
struct View {
  struct Block {
    std::optional<std::string> name;
    std::optional<uint64_t> parent;
    std::vector<int32_t> tokens;
  };
  std::map<uint64_t, Block> blocks;
  void apply(const KvEventBatch& b) {
    for (const KvEvent& e : b.events) {
      if (const auto* s = std::get_if<KvBlockStored>(&e)) {
        ASSERT_EQ(s->token_ids.size(), s->block_hashes.size() * kBs);
        ASSERT_EQ(s->extra_keys.size(), s->block_hashes.size());
        std::optional<uint64_t> parent = s->parent_block_hash;
        for (size_t i = 0; i < s->block_hashes.size(); ++i) {
          std::vector<int32_t> t(s->token_ids.begin() + i * kBs, s->token_ids.begin() + (i + 1) * kBs);
          EXPECT_FALSE(blocks.count(s->block_hashes[i])) << "stored twice";
          blocks[s->block_hashes[i]] = {s->lora_name, parent, t};
          parent = s->block_hashes[i];
        }
      } else if (const auto* r = std::get_if<KvBlockRemoved>(&e)) {
        for (uint64_t h : r->block_hashes) EXPECT_EQ(blocks.erase(h), 1u) << "removed unknown hash";
      } else {
        blocks.clear();
      }
    }
  }
};

std::vector<int32_t> seq(int32_t from, int32_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

void run(KvManager& kv, RequestId id, const std::vector<int32_t>& tokens, const ExtraKeys& keys) {
  KvBlocks hit = kv.get_computed_blocks(tokens, keys);
  ASSERT_TRUE(kv.allocate_slots(id, static_cast<int32_t>(tokens.size()) - hit.n_tokens(), hit).is_ok());
  kv.commit_full_blocks(id, tokens, keys);
  kv.free(id);
}

TEST(KvEventSource, ViewFollowsTheIndexThroughEviction) {
  KvManager kv(6, kBs);
  KvEventSource src(kBs, "CPU", [](const std::string& lineage) {
    std::vector<std::optional<std::string>> r;
    if (lineage.empty()) return std::vector<std::optional<std::string>>{std::nullopt};
    r.push_back("lora-" + lineage);
    return r;
  });
  kv.set_block_observer(&src);
  View view;
  src.clear_all();
  run(kv, 1, seq(0, 13), {});           // 3 full blocks
  run(kv, 2, seq(0, 9), {"ad", "", ""});  // 2 blocks of another lineage
  view.apply(src.take(1.0));
  EXPECT_EQ(static_cast<int32_t>(view.blocks.size()), kv.pool().index().size());
  EXPECT_EQ(src.n_hashes(), 5);
  // The base chain is one event: parents link block to block.
  int n_base = 0;
  for (const auto& [h, b] : view.blocks) n_base += !b.name.has_value();
  EXPECT_EQ(n_base, 3);
  run(kv, 3, seq(100, 17), {});  // 4 blocks in a pool of 6: evicts
  view.apply(src.take(2.0));
  EXPECT_EQ(static_cast<int32_t>(view.blocks.size()), kv.pool().index().size());
  EXPECT_EQ(src.n_hashes(), kv.pool().index().size());
  // A sequence's first block has no parent; every other block names one.
  for (const auto& [h, b] : view.blocks) {
    if (b.tokens.front() % 100 == 0 && b.tokens.front() < 200) {
      EXPECT_FALSE(b.parent.has_value());
    } else {
      EXPECT_TRUE(b.parent.has_value());
    }
  }
}

TEST(KvEventSource, AliasesChainUnderTheirOwnName) {
  KvManager kv(8, kBs);
  KvEventSource src(kBs, "CPU", [](const std::string& lineage) {
    if (lineage.empty()) return std::vector<std::optional<std::string>>{std::nullopt, "a1"};
    return std::vector<std::optional<std::string>>{"a1"};
  });
  kv.set_block_observer(&src);
  View view;
  // Two base blocks, then an adapter block on top (aLoRA after its invocation).
  const std::vector<int32_t> t = seq(0, 13);
  KvBlocks hit = kv.get_computed_blocks(t, {});
  ASSERT_TRUE(kv.allocate_slots(1, 13, hit).is_ok());
  kv.commit_full_blocks(1, std::span<const int32_t>(t).first(8), {});
  kv.commit_full_blocks(1, t, {"a1id", "", ""});
  view.apply(src.take(1.0));
  ASSERT_EQ(view.blocks.size(), 5u);  // 2 base + 2 aliases + 1 adapter
  EXPECT_EQ(src.n_hashes(), 5);
  // Under "a1" the chain is alias, alias, adapter block.
  std::vector<uint64_t> a1;
  for (const auto& [h, b] : view.blocks) {
    if (b.name == "a1") a1.push_back(h);
  }
  ASSERT_EQ(a1.size(), 3u);
  const View::Block* top = nullptr;
  for (uint64_t h : a1) {
    if (view.blocks[h].tokens.front() == 8) top = &view.blocks[h];
  }
  ASSERT_NE(top, nullptr);
  ASSERT_TRUE(top->parent.has_value());
  EXPECT_EQ(view.blocks.at(*top->parent).name, std::optional<std::string>("a1"));
  EXPECT_EQ(view.blocks.at(*top->parent).tokens.front(), 4);
  // Forgetting everything removes every name.
  kv.free(1);
  ASSERT_TRUE(kv.allocate_slots(2, 8 * kBs).is_ok());
  view.apply(src.take(2.0));
  EXPECT_TRUE(view.blocks.empty());
  EXPECT_EQ(src.n_hashes(), 0);
}

TEST(KvEventSource, AnAliasWhoseParentHasNoneIsNotAnnounced) {
  KvManager kv(8, kBs);
  std::vector<std::optional<std::string>> readers = {std::nullopt};
  KvEventSource src(kBs, "CPU", [&](const std::string&) { return readers; });
  kv.set_block_observer(&src);
  View view;
  const std::vector<int32_t> t = seq(0, 13);
  KvBlocks hit = kv.get_computed_blocks(t, {});
  ASSERT_TRUE(kv.allocate_slots(1, 13, hit).is_ok());
  kv.commit_full_blocks(1, std::span<const int32_t>(t).first(8), {});
  view.apply(src.take(1.0));
  readers = {std::nullopt, "late"};  // an adapter loaded now
  kv.commit_full_blocks(1, t, {});   // the third block: its parent has no "late" alias
  run(kv, 2, seq(500, 5), {});       // a new chain: aliased from its root
  view.apply(src.take(2.0));
  int late = 0;
  for (const auto& [h, b] : view.blocks) {
    if (b.name == "late") {
      ++late;
      EXPECT_EQ(b.tokens.front(), 500);
      EXPECT_FALSE(b.parent.has_value());
    }
  }
  EXPECT_EQ(late, 1);
  EXPECT_EQ(src.n_hashes(), 5);  // 4 base blocks + 1 alias
}

TEST(KvEventSource, ApproximateBlocksAndTenantsKeys) {
  KvManager kv(8, kBs);
  KvEventSource src(kBs, "CPU", [](const std::string&) { return std::vector<std::optional<std::string>>{std::nullopt}; });
  kv.set_block_observer(&src);
  ExtraKeys approx;
  approx.approximate = true;
  run(kv, 1, seq(0, 9), approx);
  EXPECT_FALSE(src.has_events());  // approximate K/V serves no prefix hit: not announced
  run(kv, 2, seq(50, 5), {"", "acme", "s1"});
  KvEventBatch b = src.take(3.0);
  ASSERT_EQ(b.events.size(), 1u);
  const auto& s = std::get<KvBlockStored>(b.events[0]);
  EXPECT_EQ(s.medium, "CPU");
  EXPECT_EQ(s.block_size, kBs);
  ASSERT_EQ(s.extra_keys.size(), 1u);
  EXPECT_EQ(s.extra_keys[0], (std::vector<std::string>{"s1", "tenant:acme"}));
  EXPECT_EQ(b.ts, 3.0);
}

}  // namespace
}  // namespace agentkv
