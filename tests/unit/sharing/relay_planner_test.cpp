// The relay planner on synthetic chunks and hook views (docs/scheme_algorithms.md §3.3):
// the rows' layer bands (resumed at l_start where a snapshot exists), the
// suffix of each reused run, influence and deviation selection at l_det, the
// exact limit and the empty band, and its parameter checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "sharing/scheme.h"

namespace agentkv {
namespace {

struct Chunk {
  std::vector<uint8_t> reused, has_hidden;
  std::vector<int32_t> run_start;
  std::vector<float> influence;
  bool reused_after = false;
  ReuseChunk view(int32_t begin, int32_t hidden_layer) const {
    ReuseChunk c;
    c.begin = begin;
    c.n = static_cast<int32_t>(reused.size());
    c.n_layers = 30;
    c.n_prompt = 1 << 20;
    c.block_tokens = 4;
    c.reused = reused;
    c.run_start = run_start;
    c.reused_after = reused_after;
    c.hidden_layer = hidden_layer;
    c.has_hidden = has_hidden;
    c.influence = influence;
    return c;
  }
};

Chunk chunk(int32_t begin, int32_t n, std::vector<std::pair<int32_t, int32_t>> runs) {
  Chunk c;
  c.reused.assign(n, 0);
  c.run_start.assign(n, -1);
  c.has_hidden.assign(n, 0);
  c.influence.assign(n, 0.0f);
  for (auto [a, b] : runs) {
    for (int32_t p = a; p < b; ++p) c.reused[p - begin] = 1, c.run_start[p - begin] = a, c.has_hidden[p - begin] = 1;
  }
  return c;
}

RelayConfig config(int32_t s, int32_t d, int32_t e, double dev, double inf, int32_t suffix) {
  RelayConfig c;
  c.l_start = s;
  c.l_det = d;
  c.l_end = e;
  c.dev_threshold = dev;
  c.influence_threshold = inf;
  c.suffix_tokens = suffix;
  return c;
}

// Runs the hook on rows at `pos` whose V deviates by dev[i] from the cached V
// (one head of dimension 2: v = (1, 0), cached = (cos, sin) of the angle whose
// 1 - cos is dev[i]); returns the positions kept.
std::vector<int32_t> kept(const ReuseHook& h, const std::vector<int32_t>& pos, const std::vector<float>& dev) {
  std::vector<float> v, cached;
  for (float d : dev) {
    v.insert(v.end(), {1.0f, 0.0f});
    const float c = 1.0f - d;
    cached.insert(cached.end(), {c, std::sqrt(std::max(0.0f, 1.0f - c * c))});
  }
  ReuseHookView view;
  view.pos = pos;
  view.v = v.data();
  view.cached_v = cached.data();
  view.kv_dim = 2;
  view.head_dim = 2;
  std::vector<uint8_t> keep(pos.size(), 1);
  h.fn(view, keep);
  std::vector<int32_t> out;
  for (size_t i = 0; i < pos.size(); ++i) {
    if (keep[i]) out.push_back(pos[i]);
  }
  return out;
}

TEST(RelayPlanner, RowsResumeAtLStartWhereASnapshotExists) {
  Chunk c = chunk(0, 20, {{3, 15}});
  c.has_hidden[5] = 0;  // lost: this one starts at layer 0
  std::vector<ReuseRow> rows;
  std::vector<ReuseHook> hooks;
  make_relay_planner(config(2, 4, 18, 1.5, 1.45, 3))->plan_chunk(c.view(0, 2), &rows, &hooks);
  ASSERT_EQ(rows.size(), 12u);
  for (const ReuseRow& r : rows) {
    EXPECT_EQ(r.layer_begin, r.pos == 5 ? 0 : 2) << r.pos;
    EXPECT_EQ(r.layer_end, 18);
  }
  ASSERT_EQ(hooks.size(), 1u);
  EXPECT_EQ(hooks[0].layer, 4);
  EXPECT_TRUE(hooks[0].colsum_pos.empty());
  // Snapshots kept at another layer: every row starts at layer 0.
  rows.clear();
  hooks.clear();
  make_relay_planner(config(2, 4, 18, 1.5, 1.45, 3))->plan_chunk(c.view(0, 3), &rows, &hooks);
  for (const ReuseRow& r : rows) EXPECT_EQ(r.layer_begin, 0);
}

TEST(RelayPlanner, SelectsByDeviationInfluenceAndTheSuffixOfEachRun) {
  // Runs 2..9 and 12..19; 0, 1, 10, 11 new. Influence: 4 stands out.
  Chunk c = chunk(0, 22, {{2, 10}, {12, 20}});
  for (int32_t p = 2; p < 20; ++p) c.influence[p] = 1.0f;
  c.influence[4] = 20.0f;
  std::vector<ReuseRow> rows;
  std::vector<ReuseHook> hooks;
  make_relay_planner(config(1, 3, 20, 1.5, 1.45, 2))->plan_chunk(c.view(0, 1), &rows, &hooks);
  ASSERT_EQ(hooks.size(), 1u);
  // The hook sees every row active at l_det (new ones too); deviation picks
  // 14 (0.5 against a mean of about 0.04 over the reused rows).
  std::vector<int32_t> pos;
  std::vector<float> dev;
  for (int32_t p = 0; p < 22; ++p) {
    pos.push_back(p);
    dev.push_back(p == 14 ? 0.5f : 0.01f);
  }
  // Kept: the new positions (never dropped), 4 (influence), 14 (deviation),
  // 8, 9 and 18, 19 (the suffix of each run).
  EXPECT_EQ(kept(hooks[0], pos, dev), (std::vector<int32_t>{0, 1, 4, 8, 9, 10, 11, 14, 18, 19, 20, 21}));
}

TEST(RelayPlanner, TheInfluenceMeanIsOverTokensWithAScore) {
  // 2..9 were generated upstream (scored 1.0, 3 scores 1.6); 12..19 are
  // prompt-phase K/V (no score). The mean is 1.075, so only 3 passes 1.45x;
  // over all 16 reused tokens it would be 0.54 and select all of 2..9.
  Chunk c = chunk(0, 22, {{2, 10}, {12, 20}});
  for (int32_t p = 2; p < 10; ++p) c.influence[p] = 1.0f;
  c.influence[3] = 1.6f;
  std::vector<ReuseRow> rows;
  std::vector<ReuseHook> hooks;
  make_relay_planner(config(1, 3, 20, 1e6, 1.45, 0))->plan_chunk(c.view(0, 1), &rows, &hooks);
  ASSERT_EQ(hooks.size(), 1u);
  std::vector<int32_t> pos;
  for (int32_t p = 0; p < 22; ++p) pos.push_back(p);
  EXPECT_EQ(kept(hooks[0], pos, std::vector<float>(22, 0.1f)), (std::vector<int32_t>{0, 1, 3, 10, 11, 20, 21}));
}

TEST(RelayPlanner, ARunGoingOnPastTheChunkHasNoSuffixHere) {
  Chunk c = chunk(0, 10, {{4, 10}});
  c.reused_after = true;
  std::vector<ReuseRow> rows;
  std::vector<ReuseHook> hooks;
  make_relay_planner(config(1, 3, 20, 1e6, 1e6, 3))->plan_chunk(c.view(0, 1), &rows, &hooks);
  ASSERT_EQ(hooks.size(), 1u);
  std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(kept(hooks[0], pos, std::vector<float>(10, 0.1f)), (std::vector<int32_t>{0, 1, 2, 3}));
  c.reused_after = false;
  rows.clear();
  hooks.clear();
  make_relay_planner(config(1, 3, 20, 1e6, 1e6, 3))->plan_chunk(c.view(0, 1), &rows, &hooks);
  EXPECT_EQ(kept(hooks[0], pos, std::vector<float>(10, 0.1f)), (std::vector<int32_t>{0, 1, 2, 3, 7, 8, 9}));
}

TEST(RelayPlanner, ZeroThresholdsSelectEverythingAndAnEmptyBandNothing) {
  Chunk c = chunk(0, 12, {{2, 11}});
  std::vector<ReuseRow> rows;
  std::vector<ReuseHook> hooks;
  make_relay_planner(config(0, 0, 30, 0, 0, 0))->plan_chunk(c.view(0, -1), &rows, &hooks);
  ASSERT_EQ(rows.size(), 9u);
  for (const ReuseRow& r : rows) {
    EXPECT_EQ(r.layer_begin, 0);
    EXPECT_EQ(r.layer_end, 30);
  }
  ASSERT_EQ(hooks.size(), 1u);
  std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::vector<float> dev(12, 0.0f);
  dev[3] = 0.9f;
  EXPECT_EQ(kept(hooks[0], pos, dev), pos);
  rows.clear();
  hooks.clear();
  make_relay_planner(config(7, 0, 7, 1.5, 1.45, 10))->plan_chunk(c.view(0, 7), &rows, &hooks);
  EXPECT_TRUE(rows.empty());
  EXPECT_TRUE(hooks.empty());
}

TEST(RelayPlanner, PrefixTokensRecomputeEveryLayerAndAreKept) {
  // Runs 2..9 and 12..19: with prefix_tokens 3, positions 2-4 and 12-14 run
  // every layer from 0 (epic's rows) and the hook never drops them; the
  // others keep relay's band.
  Chunk c = chunk(0, 22, {{2, 10}, {12, 20}});
  RelayConfig cfg = config(1, 3, 20, 1.5, 1.45, 0);
  cfg.prefix_tokens = 3;
  std::vector<ReuseRow> rows;
  std::vector<ReuseHook> hooks;
  make_relay_planner(cfg)->plan_chunk(c.view(0, 1), &rows, &hooks);
  ASSERT_EQ(rows.size(), 16u);
  for (const ReuseRow& r : rows) {
    const bool prefix = (r.pos >= 2 && r.pos < 5) || (r.pos >= 12 && r.pos < 15);
    EXPECT_EQ(r.layer_begin, prefix ? 0 : 1) << r.pos;
    EXPECT_EQ(r.layer_end, prefix ? -1 : 20) << r.pos;
  }
  ASSERT_EQ(hooks.size(), 1u);
  std::vector<int32_t> pos;
  std::vector<float> dev;
  for (int32_t p = 0; p < 22; ++p) pos.push_back(p), dev.push_back(p == 8 ? 0.5f : 0.01f);
  // Kept: new positions, the prefixes, and 8 (deviation).
  EXPECT_EQ(kept(hooks[0], pos, dev), (std::vector<int32_t>{0, 1, 2, 3, 4, 8, 10, 11, 12, 13, 14, 20, 21}));
  // A run that began before the chunk (run_start 0, chunk from 10) is past
  // its prefix here.
  Chunk later = chunk(10, 6, {{10, 16}});
  for (int32_t& r : later.run_start) r = 0;
  rows.clear();
  hooks.clear();
  make_relay_planner(cfg)->plan_chunk(later.view(10, 1), &rows, &hooks);
  for (const ReuseRow& r : rows) EXPECT_EQ(r.layer_begin, 1) << r.pos;
  KvSharingParams p;
  p.prefix_tokens = -1;
  EXPECT_EQ(sharing_scheme_get("relay")->check_params(p).code(), ErrorCode::kInvalidArgument);
  p.prefix_tokens = 16;
  EXPECT_EQ(sharing_scheme_get("relay")->check_params(p).code(), ErrorCode::kOk);
  EXPECT_EQ(sharing_scheme_get("epic")->check_params(p).code(), ErrorCode::kInvalidArgument);
}

TEST(RelayPlanner, ParametersAreChecked) {
  const SharingScheme* s = sharing_scheme_get("relay");
  ASSERT_NE(s, nullptr);
  KvSharingParams p;
  EXPECT_EQ(s->check_params(p).code(), ErrorCode::kOk);
  EXPECT_EQ(s->check_model(p, 30).code(), ErrorCode::kInvalidArgument);  // layers needed
  p.l_start = 1, p.l_det = 3, p.l_end = 18;
  EXPECT_EQ(s->check_model(p, 30).code(), ErrorCode::kOk);
  EXPECT_EQ(s->check_model(p, 16).code(), ErrorCode::kInvalidArgument);
  p.l_det = 18;
  EXPECT_EQ(s->check_params(p).code(), ErrorCode::kInvalidArgument);
  p.l_det = 0;
  EXPECT_EQ(s->check_params(p).code(), ErrorCode::kInvalidArgument);
  p.l_det = 3;
  p.dev_threshold = -0.1;
  EXPECT_EQ(s->check_params(p).code(), ErrorCode::kInvalidArgument);
  p.dev_threshold = 1.5;
  p.influence_threshold = std::nan("");
  EXPECT_EQ(s->check_params(p).code(), ErrorCode::kInvalidArgument);
  p.influence_threshold = 1.45;
  p.suffix_tokens = -1;
  EXPECT_EQ(s->check_params(p).code(), ErrorCode::kInvalidArgument);
  p.suffix_tokens = 10;
  EXPECT_EQ(s->check_params(p).code(), ErrorCode::kOk);
  // Relay's parameters belong to relay.
  KvSharingParams q;
  q.l_start = 1;
  EXPECT_EQ(sharing_scheme_get("cacheblend")->check_params(q).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(sharing_scheme_get("none")->check_params(q).code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace agentkv
