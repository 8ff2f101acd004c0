// The segment-reuse planners (naive, epic, cacheblend) on synthetic chunks
// and hook views: which reused positions they recompute, what cacheblend's
// check-layer hook keeps, and the parameter checks of every scheme.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "sharing/scheme.h"

namespace agentkv {
namespace {

struct Chunk {
  std::vector<uint8_t> reused;
  std::vector<int32_t> run_start;
  ReuseChunk view(int32_t begin, int32_t n_layers = 30) const {
    ReuseChunk c;
    c.begin = begin;
    c.n = static_cast<int32_t>(reused.size());
    c.n_layers = n_layers;
    c.reused = reused;
    c.run_start = run_start;
    return c;
  }
};

// Positions [begin, begin + n) with reused runs [a, b) given in positions.
Chunk chunk(int32_t begin, int32_t n, std::vector<std::pair<int32_t, int32_t>> runs) {
  Chunk c;
  c.reused.assign(n, 0);
  c.run_start.assign(n, -1);
  for (auto [a, b] : runs) {
    for (int32_t p = a; p < b; ++p) c.reused[p - begin] = 1, c.run_start[p - begin] = a;
  }
  return c;
}

std::vector<int32_t> positions(const std::vector<ReuseRow>& rows) {
  std::vector<int32_t> out;
  for (const auto& r : rows) {
    EXPECT_EQ(r.layer_begin, 0);
    EXPECT_EQ(r.layer_end, -1);
    out.push_back(r.pos);
  }
  return out;
}

TEST(ReusePlanner, NaiveRecomputesNoReusedPosition) {
  Chunk c = chunk(10, 20, {{12, 20}, {22, 29}});
  std::vector<ReuseRow> rows;
  std::vector<ReuseHook> hooks;
  make_naive_planner()->plan_chunk(c.view(10), &rows, &hooks);
  EXPECT_TRUE(rows.empty());
  EXPECT_TRUE(hooks.empty());
}

TEST(ReusePlanner, EpicRecomputesTheFirstNOfEachSegmentEvenAcrossChunks) {
  // A run starting before the chunk (at 5) counts from its own start.
  Chunk c = chunk(10, 20, {{12, 20}, {22, 29}});
  c.reused[0] = c.reused[1] = 1;
  c.run_start[0] = c.run_start[1] = 5;
  std::vector<ReuseRow> rows;
  std::vector<ReuseHook> hooks;
  make_epic_planner(3)->plan_chunk(c.view(10), &rows, &hooks);
  EXPECT_EQ(positions(rows), (std::vector<int32_t>{12, 13, 14, 22, 23, 24}));
  rows.clear();
  make_epic_planner(100)->plan_chunk(c.view(10), &rows, &hooks);  // the exact limit: every reused position
  EXPECT_EQ(rows.size(), 2u + 8u + 7u);
  rows.clear();
  make_epic_planner(0)->plan_chunk(c.view(10), &rows, &hooks);  // N = 0 is naive
  EXPECT_TRUE(rows.empty());
  EXPECT_TRUE(hooks.empty());
}

TEST(ReusePlanner, CacheblendKeepsTheTopRatioByValueDeviation) {
  Chunk c = chunk(0, 12, {{2, 12}});  // 10 reused positions
  std::vector<ReuseRow> rows;
  std::vector<ReuseHook> hooks;
  make_cacheblend_planner(0.3, 1)->plan_chunk(c.view(0), &rows, &hooks);
  EXPECT_EQ(positions(rows), (std::vector<int32_t>{2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));  // dense until the hook
  ASSERT_EQ(hooks.size(), 1u);
  EXPECT_EQ(hooks[0].layer, 1);
  EXPECT_TRUE(hooks[0].colsum_pos.empty());
  // A view of all 12 rows; deviation of position p is p (for reused ones), so
  // the top 3 = int(10 * 0.3) are 11, 10, 9. Non-reused rows always stay.
  const int64_t kvd = 2;
  std::vector<int32_t> pos;
  std::vector<float> fresh, cached;
  for (int32_t p = 0; p < 12; ++p) {
    pos.push_back(p);
    fresh.insert(fresh.end(), {static_cast<float>(p), 0.0f});
    cached.insert(cached.end(), {0.0f, 0.0f});
  }
  fresh[2 * 5] = -100.0f;  // a large negative difference counts by its square
  ReuseHookView v;
  v.pos = pos;
  v.v = fresh.data();
  v.cached_v = cached.data();
  v.kv_dim = kvd;
  std::vector<uint8_t> keep(12, 1);
  hooks[0].fn(v, keep);
  EXPECT_EQ(keep, (std::vector<uint8_t>{1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1}));
}

TEST(ReusePlanner, CacheblendAtRatioOneOrWithoutReuseHasNoHook) {
  Chunk c = chunk(0, 12, {{2, 12}});
  std::vector<ReuseRow> rows;
  std::vector<ReuseHook> hooks;
  make_cacheblend_planner(1.0, 1)->plan_chunk(c.view(0), &rows, &hooks);
  EXPECT_EQ(rows.size(), 10u);
  EXPECT_TRUE(hooks.empty());
  make_cacheblend_planner(0.15, 40)->plan_chunk(c.view(0, 30), &rows, &hooks);  // check layer past the model
  EXPECT_TRUE(hooks.empty());
  rows.clear();
  make_cacheblend_planner(0.15, 1)->plan_chunk(chunk(0, 12, {}).view(0), &rows, &hooks);
  EXPECT_TRUE(rows.empty());
  EXPECT_TRUE(hooks.empty());
}

TEST(ReusePlanner, ParametersAreCheckedPerScheme) {
  auto check = [](const char* name, KvSharingParams p) {
    const SharingScheme* s = sharing_scheme_get(name);
    EXPECT_NE(s, nullptr) << name;
    return s ? s->check_params(p).code() : ErrorCode::kInternal;
  };
  KvSharingParams none;
  for (const char* n : {"none", "alora", "icarus", "naive", "epic", "cacheblend"}) {
    EXPECT_EQ(check(n, none), ErrorCode::kOk) << n;
  }
  KvSharingParams ratio;
  ratio.ratio = 0.5;
  EXPECT_EQ(check("cacheblend", ratio), ErrorCode::kOk);
  for (const char* n : {"none", "alora", "icarus", "naive", "epic"}) {
    EXPECT_EQ(check(n, ratio), ErrorCode::kInvalidArgument) << n;
  }
  for (double bad : {-0.01, 1.01, std::nan("")}) {
    KvSharingParams p;
    p.ratio = bad;
    EXPECT_EQ(check("cacheblend", p), ErrorCode::kInvalidArgument) << bad;
  }
  KvSharingParams n;
  n.recompute_tokens = 0;
  EXPECT_EQ(check("epic", n), ErrorCode::kOk);
  EXPECT_EQ(check("cacheblend", n), ErrorCode::kInvalidArgument);
  n.recompute_tokens = -1;
  EXPECT_EQ(check("epic", n), ErrorCode::kInvalidArgument);
  KvSharingParams layer;
  layer.check_layer = 0;
  EXPECT_EQ(check("cacheblend", layer), ErrorCode::kInvalidArgument);
  layer.check_layer = 2;
  EXPECT_EQ(check("cacheblend", layer), ErrorCode::kOk);
  EXPECT_EQ(check("epic", layer), ErrorCode::kInvalidArgument);
  KvSharingParams seg;
  seg.min_segment_tokens = 1;
  EXPECT_EQ(check("naive", seg), ErrorCode::kOk);
  EXPECT_EQ(check("none", seg), ErrorCode::kInvalidArgument);
  seg.min_segment_tokens = 0;
  EXPECT_EQ(check("naive", seg), ErrorCode::kInvalidArgument);
}

TEST(ReusePlanner, RegistryNamesEverySchemeOnce) {
  std::vector<std::string> names;
  for (const char* n : sharing_scheme_names()) {
    names.emplace_back(n);
    ASSERT_NE(sharing_scheme_get(n), nullptr) << n;
    EXPECT_EQ(std::string(sharing_scheme_get(n)->name()), n);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"none", "alora", "icarus", "naive", "epic", "cacheblend"}));
}

}  // namespace
}  // namespace agentkv
