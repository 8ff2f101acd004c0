// The partial-recomputation execution model (docs/design.md §2) on small random
// models: layer-ranged rows, injected hidden states, captures, hooks that
// drop rows, and K/V copies with RoPE delta rotation. Each is checked
// against a dense run of the same rows, bitwise where the arithmetic is the
// same (the kernels are batch-invariant: a row's result does not depend on
// which other rows share its layer).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "../model/test_models.h"
#include "model/loader.h"
#include "runtime/runner.h"

namespace agentkv {
namespace {

constexpr int32_t kBs = 8;

struct Rig {
  std::shared_ptr<Model> model;
  std::unique_ptr<backend_i> backend;
  std::unique_ptr<KvStorage> kv;
  std::unique_ptr<Runner> runner;
  const ModelSpec& spec() const { return model->spec; }
};

Rig make_rig(const std::string& path, int32_t n_blocks) {
  Rig r;
  auto m = model_load_file(path, {});
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  r.model = *m;
  r.backend = backend_cpu_init(BackendConfig{2});
  const ModelSpec& s = r.model->spec;
  auto kv = KvStorage::create({s.n_layers, s.n_kv_heads, s.head_dim, kBs}, n_blocks);
  EXPECT_TRUE(kv.is_ok());
  r.kv = std::make_unique<KvStorage>(std::move(kv).value());
  r.runner = std::make_unique<Runner>(r.model, r.backend.get(), r.kv.get());
  return r;
}

std::vector<int32_t> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 300);
  return t;
}

// One sequence, positions [0, n), in blocks first_block.. ; every row dense,
// logits on the last.
Step dense_step(const std::vector<int32_t>& toks, int32_t first_block) {
  Step step;
  StepSeq q;
  const int32_t n = static_cast<int32_t>(toks.size());
  for (int32_t b = 0; b < (n + kBs - 1) / kBs; ++b) q.blocks.push_back(first_block + b);
  q.row_end = n;
  for (int32_t p = 0; p < n; ++p) {
    TokenRow row;
    row.token = toks[p];
    row.pos = p;
    row.slot = int64_t{q.blocks[p / kBs]} * kBs + p % kBs;
    row.logits = p == n - 1;
    step.rows.push_back(row);
  }
  step.seqs.push_back(q);
  return step;
}

std::vector<float> k_of(Rig& r, int layer, int32_t block, int32_t off) {
  std::vector<float> k(r.spec().kv_dim());
  r.kv->read_k(layer, block, off, k.data());
  return k;
}
std::vector<float> v_of(Rig& r, int layer, int32_t block, int32_t off) {
  std::vector<float> v(r.spec().kv_dim());
  r.kv->read_v(layer, block, off, v.data());
  return v;
}

class RunnerLayers : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SynthModelConfig c;
    c.arch = GetParam();
    c.n_layers = 4, c.d_model = 64, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_dim = 96, c.seed = 21;
    c.init_std = 0.08f;
    path_ = testing::write_synth_model(c);
    ASSERT_FALSE(path_.empty());
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

// A row that joins at layer k with the hidden state a dense run captured
// entering k, over K/V of layers < k written by rows that stopped at k,
// gives the dense run's logits bit for bit.
TEST_P(RunnerLayers, InjectedHiddenStateContinuesTheDenseForward) {
  Rig r = make_rig(path_, 16);
  const auto toks = tokens(21, 1);
  const int32_t n = static_cast<int32_t>(toks.size());
  for (int32_t k : {1, 2, 3}) {
    Step dense = dense_step(toks, 0);
    for (auto& row : dense.rows) row.capture_layer = k;
    StepOutput ref;
    ASSERT_TRUE(r.runner->execute(dense, &ref).is_ok());
    ASSERT_EQ(ref.captures.size(), static_cast<size_t>(n) * r.spec().d_model);
    EXPECT_EQ(ref.row_layers, int64_t{n} * r.spec().n_layers);

    // Lower layers into other blocks, then the upper layers from the captures.
    // They capture where they stop: the state they leave with is the one
    // the dense run had entering k.
    Step low = dense_step(toks, 4);
    for (auto& row : low.rows) row.layer_end = k, row.logits = false, row.capture_layer = k;
    StepOutput o1;
    ASSERT_TRUE(r.runner->execute(low, &o1).is_ok());
    EXPECT_EQ(o1.row_layers, int64_t{n} * k);
    EXPECT_EQ(o1.captures, ref.captures) << "captured at the end layer " << k;
    Step high = dense_step(toks, 4);
    high.hidden_in = ref.captures;
    for (int32_t p = 0; p < n; ++p) high.rows[p].layer_begin = k, high.rows[p].hidden_in = p;
    StepOutput o2;
    ASSERT_TRUE(r.runner->execute(high, &o2).is_ok());
    EXPECT_EQ(o2.logits, ref.logits) << "join at layer " << k;
    for (int l = 0; l < r.spec().n_layers; ++l) {
      EXPECT_EQ(k_of(r, l, 4 + 2, 3), k_of(r, l, 2, 3)) << "layer " << l;
    }
  }
}

// A hook that keeps every row changes nothing; it sees the fresh Q/K/V the
// cache then holds and the entries that were there before.
TEST_P(RunnerLayers, KeepAllHookIsTheDenseForwardAndSeesFreshAndCachedKv) {
  Rig r = make_rig(path_, 16);
  const auto toks = tokens(19, 2);
  StepOutput ref;
  ASSERT_TRUE(r.runner->execute(dense_step(toks, 0), &ref).is_ok());
  // Stale content in blocks 4..6: a dense run of other tokens.
  StepOutput junk;
  ASSERT_TRUE(r.runner->execute(dense_step(tokens(19, 3), 4), &junk).is_ok());
  const int64_t kvd = r.spec().kv_dim();
  std::vector<float> before_k = k_of(r, 2, 4 + 1, 2), before_v = v_of(r, 2, 4 + 1, 2);  // position 10
  Step step = dense_step(toks, 4);
  int calls = 0;
  std::vector<float> seen_cached_k, seen_fresh_k;
  LayerHook h;
  h.seq = 0;
  h.layer = 2;
  h.fn = [&](const HookView& v, std::span<uint8_t> keep) {
    ++calls;
    EXPECT_EQ(v.layer, 2);
    EXPECT_EQ(v.rows.size(), toks.size());
    EXPECT_EQ(v.kv_dim, kvd);
    seen_cached_k.assign(v.cached_k + 10 * kvd, v.cached_k + 11 * kvd);
    EXPECT_EQ(0, std::memcmp(v.cached_v + 10 * kvd, before_v.data(), sizeof(float) * kvd));
    seen_fresh_k.assign(v.k + 10 * kvd, v.k + 11 * kvd);
    EXPECT_EQ(keep.size(), toks.size());
  };
  step.hooks.push_back(h);
  StepOutput out;
  ASSERT_TRUE(r.runner->execute(step, &out).is_ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen_cached_k, before_k);
  EXPECT_EQ(seen_fresh_k, k_of(r, 2, 4 + 1, 2));  // what the layer wrote
  EXPECT_EQ(seen_fresh_k, k_of(r, 2, 1, 2));      // = the dense run's
  EXPECT_EQ(out.logits, ref.logits);
}

// Rows a hook drops at layer l wrote their fresh K/V at l, skip the rest of
// l and everything above (the cached entries there stay); the rows that stay
// give the logits of a step where the dropped rows simply end after l.
TEST_P(RunnerLayers, DroppedRowsKeepCachedKvAboveTheHookLayer) {
  Rig r = make_rig(path_, 16);
  const auto toks = tokens(24, 4);
  const int32_t n = static_cast<int32_t>(toks.size());
  const int L = r.spec().n_layers;
  auto fill_stale = [&](int32_t first_block) {
    StepOutput junk;
    ASSERT_TRUE(r.runner->execute(dense_step(tokens(n, 5), first_block), &junk).is_ok());
  };
  auto dropped = [](int32_t pos) { return pos % 3 == 1 && pos < 20; };
  // Reference: the dropped rows run layers [0, 2). Both forms write the same
  // K/V at layers 0 and 1 and none above, and the kept rows read only K/V.
  fill_stale(0);
  Step ref_step = dense_step(toks, 0);
  for (auto& row : ref_step.rows) {
    if (dropped(row.pos)) row.layer_end = 2;
  }
  StepOutput ref;
  ASSERT_TRUE(r.runner->execute(ref_step, &ref).is_ok());

  fill_stale(4);
  std::vector<float> stale_k = k_of(r, 3, 4 + 0, 1), stale_v = v_of(r, 3, 4 + 0, 1);  // position 1, layer 3
  Step step = dense_step(toks, 4);
  LayerHook h;
  h.seq = 0;
  h.layer = 1;
  h.fn = [&](const HookView& v, std::span<uint8_t> keep) {
    for (size_t i = 0; i < v.rows.size(); ++i) keep[i] = !dropped(step.rows[v.rows[i]].pos);
  };
  step.hooks.push_back(h);
  StepOutput out;
  ASSERT_TRUE(r.runner->execute(step, &out).is_ok());
  EXPECT_EQ(out.logits, ref.logits);
  int32_t n_dropped = 0;
  for (int32_t p = 0; p < n; ++p) n_dropped += dropped(p);
  EXPECT_EQ(out.row_layers, int64_t{n} * L - int64_t{n_dropped} * (L - 2));
  EXPECT_EQ(k_of(r, 3, 4, 1), stale_k);  // above the hook: untouched
  EXPECT_EQ(v_of(r, 3, 4, 1), stale_v);
  EXPECT_EQ(k_of(r, 1, 4, 1), k_of(r, 1, 0, 1));  // at the hook layer: fresh
  // Rows with logits always stay, whatever the hook says.
  Step all_out = dense_step(toks, 4);
  LayerHook h2 = h;
  h2.fn = [](const HookView&, std::span<uint8_t> keep) { std::fill(keep.begin(), keep.end(), 0); };
  all_out.hooks.push_back(h2);
  StepOutput o3;
  ASSERT_TRUE(r.runner->execute(all_out, &o3).is_ok());
  EXPECT_EQ(o3.logits.size(), static_cast<size_t>(r.spec().n_vocab));
}

// Column sums of attention from a query subset: each query distributes
// n_heads of mass (one per head) over keys up to its position.
TEST_P(RunnerLayers, HookColumnSumsCoverThePrefixOfEachQuery) {
  Rig r = make_rig(path_, 16);
  const auto toks = tokens(30, 6);
  Step step = dense_step(toks, 0);
  LayerHook h;
  h.seq = 0;
  h.layer = 2;
  h.colsum_rows = {5, 17, 29};
  std::vector<float> seen;
  h.fn = [&](const HookView& v, std::span<uint8_t>) { seen.assign(v.colsum.begin(), v.colsum.end()); };
  step.hooks.push_back(h);
  StepOutput out;
  ASSERT_TRUE(r.runner->execute(step, &out).is_ok());
  ASSERT_EQ(seen.size(), 30u);  // keys 0..29 (the latest query's position)
  double total = 0;
  for (float x : seen) {
    EXPECT_GE(x, 0.0f);
    total += x;
  }
  EXPECT_NEAR(total, 3.0 * r.spec().n_heads, 1e-4);  // f32 softmax sums: measured error < 1e-5
}

// A K/V copy moves an entry to another position: V as is, K rotated by the
// delta. At layer 0 K depends on the token and its position only, so the
// copy must equal K computed at the new position (to rotation rounding).
TEST_P(RunnerLayers, CopiedKvIsRotatedToItsNewPosition) {
  Rig r = make_rig(path_, 16);
  const auto toks = tokens(16, 7);
  StepOutput o;
  ASSERT_TRUE(r.runner->execute(dense_step(toks, 0), &o).is_ok());  // positions 0..15 in blocks 0, 1
  // The same tokens at positions 5..20 (blocks 4..6), computed directly.
  std::vector<int32_t> shifted(5, 1);
  shifted.insert(shifted.end(), toks.begin(), toks.end());
  ASSERT_TRUE(r.runner->execute(dense_step(shifted, 4), &o).is_ok());
  // Copy positions 0..15 to positions 5..20 of blocks 8..10.
  Step step;
  for (int32_t p = 0; p < 16; ++p) {
    const int32_t q = p + 5;
    step.copies.push_back({int64_t{p / kBs} * kBs + p % kBs, int64_t{8 + q / kBs} * kBs + q % kBs, 5});
  }
  ASSERT_TRUE(r.runner->execute(step, &o).is_ok());
  double worst = 0;
  for (int32_t p = 0; p < 16; ++p) {
    const int32_t q = p + 5;
    const auto direct = k_of(r, 0, 4 + q / kBs, q % kBs);
    const auto copied = k_of(r, 0, 8 + q / kBs, q % kBs);
    for (size_t j = 0; j < direct.size(); ++j) worst = std::max(worst, double(std::fabs(direct[j] - copied[j])));
    for (int l = 0; l < r.spec().n_layers; ++l) {
      EXPECT_EQ(v_of(r, l, 8 + q / kBs, q % kBs), v_of(r, l, p / kBs, p % kBs));
    }
  }
  EXPECT_LT(worst, 1e-5);  // f32 rotation of |k| ~ 1 values: measured ~1e-7
}

INSTANTIATE_TEST_SUITE_P(Archs, RunnerLayers, ::testing::Values("llama", "qwen2", "qwen3", "gemma3"));

TEST(RunnerLayersValidation, RejectsMalformedRowsHooksAndCopies) {
  SynthModelConfig c;
  c.n_layers = 3;
  std::string path = testing::write_synth_model(c);
  Rig r = make_rig(path, 4);
  const auto toks = tokens(5, 8);
  auto bad = [&](auto mutate) {
    Step s = dense_step(toks, 0);
    mutate(s);
    StepOutput o;
    return r.runner->execute(s, &o).code();
  };
  EXPECT_EQ(bad([](Step&) {}), ErrorCode::kOk);
  EXPECT_EQ(bad([](Step& s) { s.rows[0].layer_end = 0; }), ErrorCode::kInternal);
  EXPECT_EQ(bad([](Step& s) { s.rows[0].layer_begin = 3; }), ErrorCode::kInternal);
  EXPECT_EQ(bad([](Step& s) { s.rows[4].layer_end = 2; }), ErrorCode::kInternal);  // logits row stops early
  EXPECT_EQ(bad([](Step& s) { s.rows[1].layer_begin = 1; }), ErrorCode::kInternal);  // no hidden state
  EXPECT_EQ(bad([](Step& s) { s.rows[1].hidden_in = 0; }), ErrorCode::kInternal);    // at layer 0
  EXPECT_EQ(bad([](Step& s) { s.rows[1].capture_layer = 3; }), ErrorCode::kInternal);
  EXPECT_EQ(bad([](Step& s) { s.rows[1].layer_end = 1, s.rows[1].capture_layer = 2; }), ErrorCode::kInternal);
  EXPECT_EQ(bad([](Step& s) { s.rows[1].layer_end = 2, s.rows[1].capture_layer = 2; }), ErrorCode::kOk);  // where it stops
  EXPECT_EQ(bad([](Step& s) { s.hooks.push_back(LayerHook{1, 0, {}, [](const HookView&, std::span<uint8_t>) {}}); }),
            ErrorCode::kInternal);
  EXPECT_EQ(bad([](Step& s) { s.hooks.push_back(LayerHook{0, 0, {}, nullptr}); }), ErrorCode::kInternal);
  EXPECT_EQ(bad([](Step& s) { s.copies.push_back({0, 32, 0}); }), ErrorCode::kInternal);  // 4 blocks of 8: slots 0..31
  EXPECT_EQ(bad([](Step& s) { s.copies.push_back({3, 3, 0}); }), ErrorCode::kInternal);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace agentkv
