// One planner per request (docs/design.md §2-3): every scheme, single or
// composed, admits a request through SharingScheme::admit and returns the
// planner the engine asks for the request's cache keys, rows, segment reuse
// and captures.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sharing/scheme.h"
#include "unit/sharing/test_adapter.h"

namespace agentkv {
namespace {

using test_support::make_adapter;

std::unique_ptr<SeqPlanner> admit(std::string_view scheme, const Adapter* a,
                                  const std::vector<int32_t>& prompt, bool segment_reuse = true) {
  const SharingScheme* s = sharing_scheme_get(scheme);
  EXPECT_NE(s, nullptr) << scheme;
  const KvSharingParams params;
  Result<std::unique_ptr<SeqPlanner>> r = s->admit(PlanContext{a, prompt, &params, 0, segment_reuse});
  EXPECT_TRUE(r.is_ok()) << scheme << ": " << r.status().message();
  return r.is_ok() ? std::move(r).value() : nullptr;
}

bool is_reuse(std::string_view n) {
  return n == "naive" || n == "epic" || n == "cacheblend" || n == "sparsex" || n == "relay" ||
         n.find('+') != std::string_view::npos;
}

std::vector<std::string> every_name() {
  std::vector<std::string> v(sharing_scheme_names().begin(), sharing_scheme_names().end());
  v.insert(v.end(), sharing_composed_names().begin(), sharing_composed_names().end());
  return v;
}

TEST(SeqPlanner, EverySchemeAdmitsWithOnePlanner) {
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  for (const std::string& n : every_name()) {
    std::unique_ptr<SeqPlanner> p = admit(n, nullptr, prompt);
    ASSERT_NE(p, nullptr) << n;
    // aLoRA and ICaRus decide nothing for the base model: none's rules, under none's name.
    EXPECT_EQ(std::string(p->sharing().scheme), n == "alora" || n == "icarus" ? "none" : n);
    EXPECT_EQ(p->reuses_segments(), is_reuse(n)) << n;
    EXPECT_EQ(p->captures_state(), n == "relay" || n.ends_with("+relay")) << n;
    // A request that needs every prompt row (prompt logprobs) reuses nothing.
    EXPECT_FALSE(admit(n, nullptr, prompt, false)->reuses_segments()) << n;
  }
}

TEST(SeqPlanner, StopReuseMakesTheRestExact) {
  std::unique_ptr<SeqPlanner> p = admit("sparsex", nullptr, {1, 2, 3});
  ASSERT_TRUE(p->reuses_segments());
  p->stop_reuse();
  EXPECT_FALSE(p->reuses_segments());
}

TEST(SeqPlanner, ComposedTakesTheExactSchemesDecision) {
  Adapter alora = make_adapter(AdapterKind::kAlora, {7, 8});
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 7, 8, 9};
  std::unique_ptr<SeqPlanner> alone = admit("alora", &alora, prompt);
  std::unique_ptr<SeqPlanner> composed = admit("alora+relay", &alora, prompt);
  EXPECT_EQ(composed->sharing().weights_from, alone->sharing().weights_from);
  EXPECT_EQ(composed->sharing().lineage_from, alone->sharing().lineage_from);
  EXPECT_TRUE(composed->reuses_segments());
  EXPECT_FALSE(alone->reuses_segments());
}

ExtraKeys own_keys() {
  ExtraKeys k;
  k.tenant = std::string("t");  // not a literal: g++ 12 warns falsely (-Wrestrict)
  k.cache_salt = std::string("salt");
  return k;
}

TEST(SeqPlanner, CachePolicyOfTheBaseModelIsItsOwnKeys) {
  for (const std::string& n : every_name()) {
    std::unique_ptr<SeqPlanner> p = admit(n, nullptr, {1, 2, 3});
    const CacheKeyPolicy c = p->cache_policy(own_keys(), 4);
    EXPECT_EQ(c.base_keys, own_keys()) << n;
    EXPECT_FALSE(c.has_pool()) << n;
    // The shared-K/V schemes tag the base's blocks too; the others key them as the base's.
    const std::string& tag = p->sharing().shared_lineage;
    EXPECT_EQ(c.keys.lineage, tag.empty() ? own_keys().lineage : "shared:" + tag) << n;
  }
}

TEST(SeqPlanner, CachePolicyKeysAloraBlocksByTheInvocation) {
  Adapter alora = make_adapter(AdapterKind::kAlora, {7, 8});
  // The invocation starts at 9: blocks of 4 ending at or before it (two) stay base lineage.
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 1, 2, 3, 7, 8, 9};
  std::unique_ptr<SeqPlanner> p = admit("alora", &alora, prompt);
  ASSERT_EQ(p->sharing().lineage_from, 9);
  const CacheKeyPolicy c = p->cache_policy(own_keys(), 4);
  EXPECT_EQ(c.base_blocks, 2);
  EXPECT_EQ(c.base_keys, own_keys());
  EXPECT_EQ(c.keys.lineage, "id-x");
  EXPECT_EQ(c.keys.tenant, "t");
  EXPECT_EQ(c.keys.cache_salt, "salt");
  // none: the adapter's lineage from block 0.
  p = admit("none", &alora, prompt);
  EXPECT_EQ(p->cache_policy(own_keys(), 4).base_blocks, 0);
}

TEST(SeqPlanner, CachePolicyOfTheSharedSchemesAndTheLrPool) {
  Adapter lora = make_adapter(AdapterKind::kLora);
  lora.v_a_id = std::string("va");
  std::unique_ptr<SeqPlanner> p = admit("full", &lora, {1, 2, 3});
  CacheKeyPolicy c = p->cache_policy(own_keys(), 4);
  EXPECT_EQ(c.keys.lineage, "shared:full");
  EXPECT_EQ(c.base_blocks, 0);
  EXPECT_FALSE(c.has_pool());
  p = admit("lragent-base", &lora, {1, 2, 3});
  c = p->cache_policy(own_keys(), 4);
  EXPECT_EQ(c.keys.lineage, "shared:lragent");
  ASSERT_TRUE(c.has_pool());
  EXPECT_EQ(c.pool_keys->lineage, "lr-adapter:id-x");
  EXPECT_EQ(c.pool_keys->tenant, "t");  // the pool is scoped like the K/V
}

TEST(SeqPlanner, ChunkRowsAreTheSchemesRows) {
  Adapter icarus = make_adapter(AdapterKind::kIcarus);
  std::unique_ptr<SeqPlanner> p = admit("icarus", &icarus, {1, 2, 3});
  std::vector<RowSpec> rows;
  p->chunk_rows(ChunkSpan{0, 3, true}, &rows);
  ASSERT_EQ(rows.size(), 4u);  // three encoder rows and the decoder row of the sampled position
  EXPECT_FALSE(rows[2].logits);
  EXPECT_TRUE(rows[3].logits);
  EXPECT_FALSE(rows[3].write_kv);
  EXPECT_TRUE(rows[3].adapter);
}

// LRAgent's rows: each adapter row writes its LR row; below the K/V prefix
// hit the cached base K/V is kept (the LR prefill row writes only LR).
TEST(SeqPlanner, LrRowsAndTheLrPrefill) {
  Adapter lora = make_adapter(AdapterKind::kLora);
  lora.v_a_id = std::string("va");
  std::unique_ptr<SeqPlanner> p = admit("lragent-base", &lora, {1, 2, 3, 4, 5, 6});
  std::vector<RowSpec> rows;
  p->chunk_rows(ChunkSpan{2, 4, true, /*kv_hit_tokens=*/4, 0}, &rows);
  ASSERT_EQ(rows.size(), 4u);
  for (const RowSpec& r : rows) {
    EXPECT_TRUE(r.adapter && r.write_lr) << r.index;
    EXPECT_EQ(r.write_kv, r.index >= 4) << r.index;  // 2 and 3: base K/V cached
    EXPECT_FALSE(r.redo);
  }
  EXPECT_TRUE(rows.back().logits);
  // Without an LR lineage (full) nothing writes LR, and every row its K/V.
  rows.clear();
  admit("full", &lora, {1, 2, 3, 4, 5, 6})->chunk_rows(ChunkSpan{2, 4, true, 4, 0}, &rows);
  for (const RowSpec& r : rows) EXPECT_TRUE(!r.write_lr && r.write_kv) << r.index;
}

// DroidSpeak's redo rows: once per admission, at the chunk that starts at
// the K/V prefix hit, for the cached positions the agent has not processed.
TEST(SeqPlanner, RedoRowsOncePerAdmission) {
  Adapter lora = make_adapter(AdapterKind::kLora);
  KvSharingParams params;
  params.critical_layers = std::vector<int32_t>{2, 5};
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  Result<std::unique_ptr<SeqPlanner>> r =
      sharing_scheme_get("droidspeak")->admit(PlanContext{&lora, prompt, &params, 0, true});
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  SeqPlanner& p = **r;
  EXPECT_EQ(p.sharing().redo_layers, (std::vector<int32_t>{2, 5}));
  const auto mine = [](int32_t pos) { return pos == 1 || pos == 4; };  // processed here already
  std::vector<RowSpec> rows;
  p.redo_rows(ChunkSpan{0, 8, true, 0, 0}, mine, &rows);  // no prefix hit: nothing to redo
  EXPECT_TRUE(rows.empty());
  p.redo_rows(ChunkSpan{6, 2, true, 6, 1}, mine, &rows);  // admission 1 hit 6 tokens
  std::vector<int32_t> redone;
  for (const RowSpec& x : rows) {
    EXPECT_TRUE(x.redo && x.adapter && x.write_kv && !x.logits && !x.write_lr);
    redone.push_back(x.index);
  }
  EXPECT_EQ(redone, (std::vector<int32_t>{0, 2, 3, 5}));
  rows.clear();
  p.redo_rows(ChunkSpan{6, 2, true, 6, 1}, mine, &rows);  // the same admission again: done
  EXPECT_TRUE(rows.empty());
  p.redo_rows(ChunkSpan{7, 1, true, 6, 2}, mine, &rows);  // a chunk past the hit: not the first
  EXPECT_TRUE(rows.empty());
  p.redo_rows(ChunkSpan{3, 5, true, 3, 3}, mine, &rows);  // a later admission redoes again
  EXPECT_EQ(rows.size(), 2u);                             // 0 and 2
  // A planner without redo layers lists none.
  rows.clear();
  admit("full", &lora, prompt)->redo_rows(ChunkSpan{6, 2, true, 6, 1}, mine, &rows);
  EXPECT_TRUE(rows.empty());
}

}  // namespace
}  // namespace agentkv
