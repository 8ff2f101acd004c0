// PromptDeferral (runtime/prompt_deferral.h): one request's whole-prompt
// selection, without an engine. The deferred states live in blocks the KV
// pool lends and go back at release; a step splits only over its budget;
// the split rows stop above the last hook and capture there; the hooks'
// verdicts decide which rows resume; the kept rows resume in position
// order, within each share's budget, and the first of a share always fits.
#include "runtime/prompt_deferral.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace agentkv {
namespace {

// A pool of 8 blocks; a block holds 2 layers x K,V x 4 tokens x 4 floats =
// 256 bytes: 5 rows of 12 floats (the scratch's width).
struct Pool {
  KvGeometry g{/*n_layers=*/2, /*kv_heads=*/1, /*head_dim=*/4, /*block_size=*/4, KvDType::kF32};
  KvStorage storage = std::move(KvStorage::create(g, 8)).value();
  KvManager kv{8, 4};
  KvScratch scratch{&kv, &storage, /*width=*/12};
};

// Rows of positions [begin, end), each running layers [0, all).
Step prompt_rows(int32_t begin, int32_t end) {
  Step st;
  for (int32_t p = begin; p < end; ++p) {
    TokenRow row;
    row.token = p;
    row.pos = p;
    row.slot = p;
    st.rows.push_back(row);
  }
  st.rows.back().logits = true;
  st.seqs.push_back(StepSeq{0, static_cast<int32_t>(st.rows.size()), {}});
  return st;
}

TEST(PromptDeferral, StatesLiveInBlocksLentByThePool) {
  Pool pool;
  PromptDeferral d;
  EXPECT_FALSE(d.started());
  EXPECT_EQ(d.begin(), -1);
  // 41 rows need 9 blocks of 5: more than the pool. The request then
  // selects per chunk for good.
  PromptDeferral big;
  EXPECT_FALSE(big.start(&pool.scratch, 1, 0, 41));
  EXPECT_TRUE(big.off());
  EXPECT_FALSE(big.started());
  EXPECT_EQ(pool.kv.pool().n_available(), 8);

  ASSERT_TRUE(d.start(&pool.scratch, 2, 10, 30));  // 20 rows: 4 blocks
  EXPECT_TRUE(d.started());
  EXPECT_FALSE(d.off());
  EXPECT_EQ(d.begin(), 10);
  EXPECT_EQ(pool.kv.pool().n_available(), 4);
  ASSERT_TRUE(d.start(&pool.scratch, 2, 16, 30));  // started: nothing changes
  EXPECT_EQ(d.begin(), 10);
  EXPECT_EQ(pool.kv.pool().n_available(), 4);

  std::vector<float> h(12), back(12);
  for (int32_t p = 10; p < 30; ++p) {
    std::iota(h.begin(), h.end(), static_cast<float>(100 * p));
    d.put(p, h.data());
  }
  for (int32_t p = 10; p < 30; ++p) {
    d.get(p, back.data());
    EXPECT_EQ(back[0], static_cast<float>(100 * p)) << p;
    EXPECT_EQ(back[11], static_cast<float>(100 * p + 11)) << p;
  }
  d.release();
  EXPECT_FALSE(d.started());
  EXPECT_EQ(pool.kv.pool().n_available(), 8);
  d.release();  // nothing held: nothing happens
  EXPECT_EQ(pool.kv.pool().n_available(), 8);
}

TEST(PromptDeferral, SplitsOnlyOverTheBudgetAndAboveTheLastHook) {
  Pool pool;
  PromptDeferral d;
  ASSERT_TRUE(d.start(&pool.scratch, 1, 4, 10));
  // Six rows of 8 layers: 48 token-layers.
  Step st = prompt_rows(4, 10);
  EXPECT_FALSE(d.split(&st, 0, /*last_hook=*/2, /*n_layers=*/8, /*max_token_layers=*/48, 10));
  EXPECT_FALSE(d.split(&st, 0, /*last_hook=*/7, 8, 47, 10));  // the hooks are in the last layer
  EXPECT_FALSE(d.splitting());
  EXPECT_EQ(st.rows[0].layer_end, kAllLayers);

  st.rows[1].layer_end = 3;                                   // ends at the resume layer: not split
  st.rows[2].layer_begin = 3;                                 // begins there: not split either
  EXPECT_FALSE(d.split(&st, 0, /*last_hook=*/2, 8, 40, 10));  // 40 token-layers now
  ASSERT_TRUE(d.split(&st, 0, /*last_hook=*/2, 8, 39, 10));
  EXPECT_TRUE(d.splitting());
  EXPECT_TRUE(d.capturing());
  EXPECT_EQ(d.resume_layer(), 3);
  for (size_t i : {0u, 3u, 4u, 5u}) {
    EXPECT_EQ(st.rows[i].layer_end, 3) << i;
    EXPECT_EQ(st.rows[i].capture_layer, 3) << i;
    EXPECT_FALSE(st.rows[i].logits) << i;
  }
  EXPECT_EQ(st.rows[1].capture_layer, -1);
  EXPECT_EQ(st.rows[2].layer_end, kAllLayers);
  // Four rows of 5 layers each wait: 20 token-layers, 3 rows of 8.
  EXPECT_EQ(d.pending_work(8), 3);
}

TEST(PromptDeferral, ADecoderRowWaitsForItsEncoderRow) {
  Pool pool;
  PromptDeferral d;
  ASSERT_TRUE(d.start(&pool.scratch, 1, 0, 4));
  Step st = prompt_rows(0, 4);
  TokenRow decoder = st.rows.back();
  decoder.slot = -1;  // reads its encoder row's K/V
  st.rows.push_back(decoder);
  st.seqs.back().row_end = 5;
  ASSERT_TRUE(d.split(&st, 0, /*last_hook=*/0, 4, 4, 4));
  ASSERT_EQ(st.rows.size(), 4u);
  EXPECT_EQ(st.seqs.back().row_end, 4);
  EXPECT_EQ(st.rows[3].slot, 3);
  EXPECT_EQ(st.rows[3].layer_end, 1);
  EXPECT_FALSE(st.rows[3].logits);
}

TEST(PromptDeferral, TheHooksVerdictsDecideWhatResumesInPositionOrder) {
  Pool pool;
  PromptDeferral d;
  ASSERT_TRUE(d.start(&pool.scratch, 1, 0, 6));
  Step st = prompt_rows(0, 6);
  st.rows[4].layer_end = 6;
  ASSERT_TRUE(d.split(&st, 0, /*last_hook=*/1, /*n_layers=*/8, 8, 6));
  d.drop(1);
  d.drop(3);
  d.after_split();
  EXPECT_FALSE(d.splitting());
  EXPECT_TRUE(d.started());
  // Kept: 0, 2, 5 (layers [2, 8): 6 each) and 4 (layers [2, 6): 4).
  EXPECT_EQ(d.pending_work(8), 3);  // 22 token-layers
  int64_t spent = 0;
  int32_t pos = -1, end = -1;
  // A share of 10 token-layers: the first row always fits, the second not.
  ASSERT_TRUE(d.take(10, &spent, &pos, &end));
  EXPECT_EQ(pos, 0);
  EXPECT_EQ(end, 8);
  EXPECT_FALSE(d.take(10, &spent, &pos, &end));
  EXPECT_EQ(spent, 6);
  // A share of 1 token-layer still takes one row.
  spent = 0;
  ASSERT_TRUE(d.take(1, &spent, &pos, &end));
  EXPECT_EQ(pos, 2);
  EXPECT_EQ(d.pending_work(8), 2);  // 10 token-layers
  spent = 0;
  ASSERT_TRUE(d.take(10, &spent, &pos, &end));
  EXPECT_EQ(pos, 4);
  EXPECT_EQ(end, 6);
  ASSERT_TRUE(d.take(10, &spent, &pos, &end));
  EXPECT_EQ(pos, 5);
  EXPECT_EQ(spent, 10);
  EXPECT_TRUE(d.all_taken());
  EXPECT_EQ(d.pending_work(8), 0);
  EXPECT_FALSE(d.take(100, &spent, &pos, &end));
  d.release();
  EXPECT_EQ(pool.kv.pool().n_available(), 8);
}

TEST(PromptDeferral, NothingKeptGivesTheScratchBack) {
  Pool pool;
  PromptDeferral d;
  ASSERT_TRUE(d.start(&pool.scratch, 1, 0, 3));
  EXPECT_EQ(pool.kv.pool().n_available(), 7);
  Step st = prompt_rows(0, 3);
  ASSERT_TRUE(d.split(&st, 0, /*last_hook=*/0, 4, 4, 3));
  for (int32_t p = 0; p < 3; ++p) d.drop(p);
  d.after_split();
  EXPECT_FALSE(d.started());
  EXPECT_FALSE(d.resuming());
  EXPECT_EQ(d.pending_work(4), 0);
  EXPECT_EQ(pool.kv.pool().n_available(), 8);
}

}  // namespace
}  // namespace agentkv
