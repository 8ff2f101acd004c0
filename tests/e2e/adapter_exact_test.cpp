// Multi-adapter Steps on the real model (SmolLM2, Q4_1): random rank-8
// adapters on all seven targets with trained-like magnitudes. An adapter's
// rows equal the merged model W + scale·B·A (f32, packed copies cleared: the
// adapter runs decode on the packed Q4_1 weights plus the LoRA GEMV); mixed
// steps equal each sequence alone; the ICaRus paired decode step equals the
// split steps and an unshared decoder. Skipped when the model file is absent.
#include <gtest/gtest.h>

#include "../ci_required.h"

#include <cstdlib>
#include <filesystem>

#include "../unit/runtime/adapter_test_util.h"
#include "model/loader.h"
#include "source_dir.h"

namespace agentkv {
namespace {

using testing::AdapterRig;
using testing::make_adapter_rig;
using testing::max_rel_err;
using testing::TestSeq;

std::string model_path() {
  if (const char* e = std::getenv("AGENTKV_MODEL"); e && *e) return e;
  return agentkv::test::source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::vector<int32_t> tokens(int n, uint32_t seed, int32_t n_vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
  return t;
}

class AdapterExact : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(model_path())) return;
    auto m = model_load_file(model_path(), {.n_threads = 2});
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    model_ = *m;
    x_ = new Adapter(testing::random_adapter(*model_, 8, 0.05, 1, "x"));
    y_ = new Adapter(testing::random_adapter(*model_, 16, 0.05, 2, "y", {0, 1, 2, 3}));  // attention only
  }
  static void TearDownTestSuite() {
    delete x_;
    delete y_;
    model_.reset();
  }
  void SetUp() override {
    AGENTKV_REQUIRE(!model_, "model not found: " << model_path());
  }
  static std::shared_ptr<Model> model_;
  static Adapter *x_, *y_;
};
std::shared_ptr<Model> AdapterExact::model_;
Adapter* AdapterExact::x_ = nullptr;
Adapter* AdapterExact::y_ = nullptr;

TEST_F(AdapterExact, AdapterRowsEqualMergedModel) {
  ASSERT_FALSE(model_->w.layers[0].wq.packed.empty());
  const int32_t nv = model_->spec.n_vocab;
  AdapterRig r = make_adapter_rig(model_, 16, 16, 2);
  AdapterRig merged = make_adapter_rig(testing::merge_adapter(*model_, *x_), 16, 16, 2);
  TestSeq a{tokens(44, 1, nv), x_}, m{tokens(44, 1, nv), nullptr}, base{tokens(44, 1, nv), nullptr};
  testing::seq_alloc(r, a);
  testing::seq_alloc(merged, m);
  testing::seq_alloc(r, base);
  for (auto [rig, q] : {std::pair{&r, &a}, std::pair{&merged, &m}, std::pair{&r, &base}}) {
    testing::step_together(*rig, {q}, {40});
    for (int i = 0; i < 4; ++i) testing::step_together(*rig, {q}, {1});
  }
  const double err = max_rel_err(a.logits, m.logits);
  std::printf("[ adapter vs merged ] %s: max relative logit error %.3g (adapter vs base %.3g)\n",
              std::filesystem::path(model_path()).filename().c_str(), err,
              max_rel_err(a.logits, base.logits));
  EXPECT_LE(err, 1e-4);
  EXPECT_GT(max_rel_err(a.logits, base.logits), 1e-3);
}

TEST_F(AdapterExact, MixedStepEqualsEachSequenceAlone) {
  const int32_t nv = model_->spec.n_vocab;
  AdapterRig r = make_adapter_rig(model_, 16, 32, 2);
  const std::vector<const Adapter*> which = {nullptr, x_, y_};
  const std::vector<int32_t> lens = {23, 31, 9};
  std::vector<TestSeq> alone(3), mixed(3);
  for (int i = 0; i < 3; ++i) {
    alone[i] = TestSeq{tokens(lens[i] + 3, 140 + i, nv), which[i]};
    mixed[i] = alone[i];
    testing::seq_alloc(r, alone[i]);
    testing::seq_alloc(r, mixed[i]);
  }
  for (auto& q : alone) {
    testing::step_together(r, {&q}, {static_cast<int32_t>(q.toks.size()) - 3});
    for (int t = 0; t < 3; ++t) testing::step_together(r, {&q}, {1});
  }
  std::vector<TestSeq*> all = {&mixed[0], &mixed[1], &mixed[2]};
  testing::step_together(r, all, lens);
  for (int t = 0; t < 3; ++t) testing::step_together(r, all, {1, 1, 1});
  for (int i = 0; i < 3; ++i) {
    // Bitwise: the kernels' reduction order does not depend on the Step.
    EXPECT_EQ(mixed[i].logits, alone[i].logits) << "sequence " << i << ", max relative difference "
                                                << max_rel_err(mixed[i].logits, alone[i].logits);
  }
}

TEST_F(AdapterExact, IcarusPairedDecodeEqualsSeparateStepsAndUnsharedReference) {
  const int32_t nv = model_->spec.n_vocab, bs = 16, n_prompt = 37, n_decode = 4;
  AdapterRig r = make_adapter_rig(model_, bs, 16, 2);
  AdapterRig merged = make_adapter_rig(testing::merge_adapter(*model_, *x_), bs, 16, 2);
  const auto toks = tokens(n_prompt + n_decode, 7, nv);
  TestSeq paired{toks, nullptr}, split{toks, nullptr};
  testing::seq_alloc(r, paired);
  testing::seq_alloc(r, split);
  testing::step_together(r, {&paired}, {n_prompt});
  testing::step_together(r, {&split}, {n_prompt});
  std::vector<float> lp, ls, lref, out;
  for (int32_t p = n_prompt; p < n_prompt + n_decode; ++p) {
    Step step;
    step.adapters = {x_};
    step.rows = {TokenRow{toks[p], p, testing::seq_slot(r, paired, p), false, -1}, TokenRow{toks[p], p, -1, true, 0}};
    step.seqs = {StepSeq{0, 2, paired.blocks}};
    ASSERT_TRUE(r.runner->execute(step, &out).is_ok());
    lp.insert(lp.end(), out.begin(), out.end());

    Step enc, dec;
    enc.rows = {TokenRow{toks[p], p, testing::seq_slot(r, split, p), false, -1}};
    enc.seqs = {StepSeq{0, 1, split.blocks}};
    dec.adapters = {x_};
    dec.rows = {TokenRow{toks[p], p, -1, true, 0}};
    dec.seqs = {StepSeq{0, 1, split.blocks}};
    ASSERT_TRUE(r.runner->execute(enc, &out).is_ok());
    ASSERT_TRUE(r.runner->execute(dec, &out).is_ok());
    ls.insert(ls.end(), out.begin(), out.end());

    testing::copy_kv_blocks(*r.kv, *merged.kv, paired.blocks);
    Step ref;
    ref.rows = {TokenRow{toks[p], p, -1, true, -1}};
    ref.seqs = {StepSeq{0, 1, paired.blocks}};
    ASSERT_TRUE(merged.runner->execute(ref, &out).is_ok());
    lref.insert(lref.end(), out.begin(), out.end());
  }
  const double e_split = max_rel_err(lp, ls), e_ref = max_rel_err(lp, lref);
  std::printf("[ icarus paired ] %s: vs split steps %.3g, vs unshared reference %.3g\n",
              std::filesystem::path(model_path()).filename().c_str(), e_split, e_ref);
  EXPECT_EQ(lp, ls) << "paired vs split steps must be bitwise equal";
  EXPECT_LE(e_ref, 1e-4);
  EXPECT_LE(max_rel_err(ls, lref), 1e-4);
}

}  // namespace
}  // namespace agentkv
