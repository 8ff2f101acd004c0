// The segment-reuse planners (naive, epic, cacheblend, sparsex) on synthetic
// chunks and hook views: which reused positions they recompute, what the
// selecting hooks keep, and the parameter checks of every scheme.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "sharing/scheme.h"

namespace agentkv {
namespace {

struct Chunk {
  std::vector<uint8_t> reused;
  std::vector<int32_t> run_start;
  ReuseChunk view(int32_t begin, int32_t n_layers = 30, int32_t n_prompt = 1 << 20, int32_t block_tokens = 4) const {
    ReuseChunk c;
    c.begin = begin;
    c.n = static_cast<int32_t>(reused.size());
    c.n_layers = n_layers;
    c.n_prompt = n_prompt;
    c.block_tokens = block_tokens;
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

// Runs a sparsex hook over every row of a chunk, with colsum[p] = score(p);
// returns the positions that stay above the boundary.
std::vector<int32_t> sparsex_kept(const ReuseHook& h, int32_t begin, int32_t n, const std::vector<float>& colsum) {
  std::vector<int32_t> pos(n);
  for (int32_t i = 0; i < n; ++i) pos[i] = begin + i;
  ReuseHookView v;
  v.pos = pos;
  v.colsum = colsum;
  std::vector<uint8_t> keep(n, 1);
  h.fn(v, keep);
  std::vector<int32_t> out;
  for (int32_t i = 0; i < n; ++i) {
    if (keep[i]) out.push_back(pos[i]);
  }
  return out;
}

SparsexConfig sparsex(int32_t boundary, double ratio, int32_t overflow_blocks, int32_t tail) {
  SparsexConfig c;
  c.boundary_layer = boundary;
  c.ratio = ratio;
  c.overflow_blocks = overflow_blocks;
  c.tail_tokens = tail;
  return c;
}

TEST(ReusePlanner, SparsexKeepsNonReusedOverflowAndTopKByColumnSum) {
  // Positions 0..39 of a 41-token prompt (block 4): 0..1 new, 2..17 reused,
  // 18..19 new, 20..39 reused, 40 (the last) new.
  Chunk c = chunk(0, 41, {{2, 18}, {20, 40}});
  std::vector<ReuseRow> rows;
  std::vector<ReuseHook> hooks;
  make_sparsex_planner(sparsex(5, 0.25, 1, 0))->plan_chunk(c.view(0, 30, 41, 4), &rows, &hooks);
  EXPECT_EQ(rows.size(), 36u);  // every reused position runs densely up to the boundary
  ASSERT_EQ(hooks.size(), 1u);
  EXPECT_EQ(hooks[0].layer, 5);
  // Sparse-Q: the positions not reused.
  EXPECT_EQ(hooks[0].colsum_pos, (std::vector<int32_t>{0, 1, 18, 19, 40}));
  // Scores: position p scores p, except 10 and 30, which score highest; k =
  // int(36 * 0.25) = 9 among the reused positions overflow did not take.
  std::vector<float> colsum(41);
  for (int32_t p = 0; p < 41; ++p) colsum[p] = static_cast<float>(p) / 100.0f;
  colsum[10] = 5.0f;
  colsum[30] = 4.0f;
  const std::vector<int32_t> kept = sparsex_kept(hooks[0], 0, 41, colsum);
  // Overflow (one block of 4 each side of 0..1, 18..19 and 40): 2..5,
  // 14..17, 20..23 and 36..39. Top 9 of the rest: 10, 30, then by score
  // 35, 34, 33, 32, 31, 29, 28.
  const std::vector<int32_t> want = {0,  1,  2,  3,  4,  5,  10, 14, 15, 16, 17, 18, 19, 20, 21,
                                     22, 23, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40};
  EXPECT_EQ(kept, want);
}

TEST(ReusePlanner, SparsexTailFallbackAndChunkBoundaries) {
  // A 30-token prompt that ends in reused text: 0..3 new, 4..28 reused, 29
  // (the last, never reused) new. No overflow, tail 6, ratio 0.
  Chunk c = chunk(0, 30, {{4, 29}});
  std::vector<ReuseRow> rows;
  std::vector<ReuseHook> hooks;
  make_sparsex_planner(sparsex(0, 0.0, 0, 6))->plan_chunk(c.view(0, 30, 30, 4), &rows, &hooks);
  ASSERT_EQ(hooks.size(), 1u);
  EXPECT_EQ(hooks[0].layer, 0);  // the variant without the hybrid boundary selects at layer 0
  std::vector<float> colsum(30, 1.0f);
  EXPECT_EQ(sparsex_kept(hooks[0], 0, 30, colsum), (std::vector<int32_t>{0, 1, 2, 3, 23, 24, 25, 26, 27, 28, 29}));

  // Two chunks: overflow after a run not reused reaches into the next chunk;
  // a chunk with no Sparse-Q row scores with all its rows.
  auto planner = make_sparsex_planner(sparsex(2, 0.0, 1, 0));
  Chunk first = chunk(0, 10, {{0, 8}});  // 8, 9 new at the end of the chunk
  rows.clear();
  hooks.clear();
  planner->plan_chunk(first.view(0, 30, 100, 4), &rows, &hooks);
  ASSERT_EQ(hooks.size(), 1u);
  EXPECT_EQ(sparsex_kept(hooks[0], 0, 10, std::vector<float>(10, 1.0f)), (std::vector<int32_t>{4, 5, 6, 7, 8, 9}));
  Chunk second = chunk(10, 10, {{10, 20}});  // reused from end to end
  rows.clear();
  hooks.clear();
  planner->plan_chunk(second.view(10, 30, 100, 4), &rows, &hooks);
  ASSERT_EQ(hooks.size(), 1u);
  EXPECT_EQ(hooks[0].colsum_pos.size(), 10u);
  EXPECT_EQ(sparsex_kept(hooks[0], 10, 10, std::vector<float>(20, 1.0f)), (std::vector<int32_t>{10, 11, 12, 13}));
}

TEST(ReusePlanner, SparsexExactLimitsHaveNoHook) {
  Chunk c = chunk(0, 12, {{2, 11}});
  for (const SparsexConfig& cfg : {sparsex(30, 0.15, 1, 64), sparsex(40, 0.15, 1, 64), sparsex(5, 1.0, 1, 64)}) {
    std::vector<ReuseRow> rows;
    std::vector<ReuseHook> hooks;
    make_sparsex_planner(cfg)->plan_chunk(c.view(0, 30, 12), &rows, &hooks);
    EXPECT_EQ(positions(rows).size(), 9u);  // every reused position, every layer
    EXPECT_TRUE(hooks.empty());
  }
}

TEST(ReusePlanner, ParametersAreCheckedPerScheme) {
  auto check = [](const char* name, KvSharingParams p) {
    const SharingScheme* s = sharing_scheme_get(name);
    EXPECT_NE(s, nullptr) << name;
    return s ? s->check_params(p).code() : ErrorCode::kInternal;
  };
  KvSharingParams none;
  for (const char* n : {"none", "alora", "icarus", "naive", "epic", "cacheblend", "sparsex"}) {
    EXPECT_EQ(check(n, none), ErrorCode::kOk) << n;
  }
  KvSharingParams ratio;
  ratio.ratio = 0.5;
  EXPECT_EQ(check("cacheblend", ratio), ErrorCode::kOk);
  EXPECT_EQ(check("sparsex", ratio), ErrorCode::kOk);
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
  // sparsex's own: each >= 0, and taken by no other scheme.
  for (auto field : {&KvSharingParams::boundary_layer, &KvSharingParams::overflow_blocks, &KvSharingParams::tail_tokens}) {
    KvSharingParams p;
    p.*field = 0;
    EXPECT_EQ(check("sparsex", p), ErrorCode::kOk);
    EXPECT_EQ(check("cacheblend", p), ErrorCode::kInvalidArgument);
    EXPECT_EQ(check("none", p), ErrorCode::kInvalidArgument);
    p.*field = -1;
    EXPECT_EQ(check("sparsex", p), ErrorCode::kInvalidArgument);
  }
  KvSharingParams sx_layer;
  sx_layer.check_layer = 2;
  EXPECT_EQ(check("sparsex", sx_layer), ErrorCode::kInvalidArgument);  // its layer is boundary_layer
}

TEST(ReusePlanner, RegistryNamesEverySchemeOnce) {
  std::vector<std::string> names;
  for (const char* n : sharing_scheme_names()) {
    names.emplace_back(n);
    ASSERT_NE(sharing_scheme_get(n), nullptr) << n;
    EXPECT_EQ(std::string(sharing_scheme_get(n)->name()), n);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"none", "alora", "icarus", "naive", "epic", "cacheblend", "sparsex", "relay",
                                             "full", "droidspeak", "lragent-base", "lragent-baselr"}));
}

// Compositions: alora or icarus with one segment-reuse scheme, in either
// order, one static instance under the canonical exact+reuse name; the
// exact scheme plans the weights and lineage, the reuse scheme takes the
// parameters and makes the planner. Other pairs say why they do not compose.
TEST(ReusePlanner, CompositionsAreExactPlusReuse) {
  for (const char* n : sharing_composed_names()) {
    const SharingScheme* s = sharing_scheme_get(n);
    ASSERT_NE(s, nullptr) << n;
    EXPECT_EQ(std::string(s->name()), n);
    const std::string name(n);
    const size_t plus = name.find('+');
    EXPECT_EQ(sharing_scheme_get(name.substr(plus + 1) + "+" + name.substr(0, plus)), s) << n;
    std::unique_ptr<SeqPlanner> p = s->make_planner(KvSharingParams{});
    ASSERT_NE(p, nullptr) << n;
    EXPECT_EQ(p->captures_state(), name.ends_with("+relay")) << n;
  }
  EXPECT_EQ(sharing_composed_names().size(), 10u);
  KvSharingParams ratio;
  ratio.ratio = 0.5;
  EXPECT_TRUE(sharing_scheme_get("alora+sparsex")->check_params(ratio).is_ok());
  EXPECT_FALSE(sharing_scheme_get("alora+naive")->check_params(ratio).is_ok());  // naive takes no ratio
  const std::pair<const char*, const char*> bad[] = {{"sparsex+cacheblend", "two segment-reuse schemes"},
                                                     {"lragent-base+icarus", "two exact schemes"},
                                                     {"alora+icarus", "two exact schemes"},
                                                     {"full+sparsex", "does not compose"},
                                                     {"sparsex+droidspeak", "does not compose"},
                                                     {"none+naive", "does not compose"},
                                                     {"alora+bogus", "unknown"},
                                                     {"alora+sparsex+naive", "unknown"},
                                                     {"+alora", "unknown"}};
  for (const auto& [name, why] : bad) {
    EXPECT_EQ(sharing_scheme_get(name), nullptr) << name;
    const Result<const SharingScheme*> r = sharing_scheme_find(name);
    ASSERT_FALSE(r.is_ok()) << name;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << name << ": " << r.status().message();
  }
}

}  // namespace
}  // namespace agentkv
