// The runner with adapters on small random-weight models: an adapter's rows
// equal the merged model W + scale·B·A; base and adapter rows of several
// sequences in one Step equal each sequence alone; the ICaRus paired decode
// step (encoder row writes the base K/V, decoder row reads it with the
// adapter) equals the two rows in separate Steps and a decoder with its own
// copy of the base K/V; bad adapter rows are errors.
#include <gtest/gtest.h>

#include <random>

#include "../model/test_models.h"
#include "adapter_test_util.h"
#include "model/loader.h"

namespace agentkv {
namespace {

using testing::AdapterRig;
using testing::make_adapter_rig;
using testing::max_rel_err;
using testing::TestSeq;

std::vector<int32_t> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 300);
  return t;
}

class RunnerAdapter : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    path_ = testing::write_synth_model(testing::small_synth_config(21, GetParam()));
    ASSERT_FALSE(path_.empty());
    auto m = model_load_file(path_, {});
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    model_ = *m;
    x_ = testing::random_adapter(*model_, 8, 0.05, 1, "x");
    y_ = testing::random_adapter(*model_, 4, 0.05, 2, "y", {0, 2, 5});  // q, v, up only
  }
  void TearDown() override { std::remove(path_.c_str()); }

  std::string path_;
  std::shared_ptr<Model> model_;
  Adapter x_, y_;
};

// Prefill in one Step (the GEMM path of the lora op), then decode steps of one
// row (the GEMV path): every row's logits equal the merged model's.
TEST_P(RunnerAdapter, AdapterRowsEqualMergedModel) {
  AdapterRig r = make_adapter_rig(model_, 8, 32);
  AdapterRig merged = make_adapter_rig(testing::merge_adapter(*model_, x_), 8, 32);
  TestSeq a{tokens(33, 1), &x_}, m{tokens(33, 1), nullptr}, base{tokens(33, 1), nullptr};
  testing::seq_alloc(r, a);
  testing::seq_alloc(merged, m);
  testing::seq_alloc(r, base);
  for (auto [rig, q] : {std::pair{&r, &a}, std::pair{&merged, &m}, std::pair{&r, &base}}) {
    testing::step_together(*rig, {q}, {29});
    for (int i = 0; i < 4; ++i) testing::step_together(*rig, {q}, {1});
  }
  const double err = max_rel_err(a.logits, m.logits);
  std::printf("[ adapter vs merged ] %s: max relative logit error %.3g\n", GetParam().c_str(), err);
  EXPECT_LE(err, 1e-4);
  // The adapter changes the output (else the test above proves nothing).
  EXPECT_GT(max_rel_err(a.logits, base.logits), 1e-3);
}

// Base, X, Y and a second X sequence in the same Steps (prefill chunks of
// different lengths, then decode rows) equal each sequence run alone.
TEST_P(RunnerAdapter, MixedStepEqualsEachSequenceAlone) {
  AdapterRig r = make_adapter_rig(model_, 8, 64);
  const std::vector<const Adapter*> which = {nullptr, &x_, &y_, &x_};
  const std::vector<int32_t> lens = {13, 21, 6, 17};
  std::vector<TestSeq> alone(4), mixed(4);
  for (int i = 0; i < 4; ++i) {
    alone[i] = TestSeq{tokens(lens[i] + 3, 40 + i), which[i]};
    mixed[i] = alone[i];
    testing::seq_alloc(r, alone[i]);
    testing::seq_alloc(r, mixed[i]);
  }
  for (auto& q : alone) {
    testing::step_together(r, {&q}, {static_cast<int32_t>(q.toks.size()) - 3});
    for (int t = 0; t < 3; ++t) testing::step_together(r, {&q}, {1});
  }
  std::vector<TestSeq*> all = {&mixed[0], &mixed[1], &mixed[2], &mixed[3]};
  testing::step_together(r, all, {lens[0], lens[1], lens[2], lens[3]});
  for (int t = 0; t < 3; ++t) testing::step_together(r, all, {1, 1, 1, 1});
  for (int i = 0; i < 4; ++i) {
    const double err = max_rel_err(mixed[i].logits, alone[i].logits);
    EXPECT_LE(err, 3e-5) << "sequence " << i;
  }
}

// ICaRus paired decode (App. B, Alg. 3): the prompt's K/V is the base's. Each
// decode Step has the encoder row (base, writes K/V at p, no logits) and the
// decoder row (adapter, slot -1, logits) at the same position p.
TEST_P(RunnerAdapter, IcarusPairedDecodeEqualsSeparateStepsAndUnsharedReference) {
  const int32_t bs = 8, n_prompt = 19, n_decode = 4;
  AdapterRig r = make_adapter_rig(model_, bs, 32);
  AdapterRig merged = make_adapter_rig(testing::merge_adapter(*model_, x_), bs, 32);
  const auto toks = tokens(n_prompt + n_decode, 7);
  TestSeq paired{toks, nullptr}, split{toks, nullptr};
  testing::seq_alloc(r, paired);
  testing::seq_alloc(r, split);
  testing::step_together(r, {&paired}, {n_prompt});
  testing::step_together(r, {&split}, {n_prompt});
  const int64_t nv = model_->spec.n_vocab;
  std::vector<float> lp, ls, lref;
  for (int32_t p = n_prompt; p < n_prompt + n_decode; ++p) {
    // One Step, one sequence, two rows at position p.
    Step step;
    step.adapters = {&x_};
    step.rows = {TokenRow{toks[p], p, testing::seq_slot(r, paired, p), false, -1},
                 TokenRow{toks[p], p, -1, true, 0}};
    step.seqs = {StepSeq{0, 2, paired.blocks}};
    std::vector<float> out;
    ASSERT_TRUE(r.runner->execute(step, &out).is_ok());
    ASSERT_EQ(static_cast<int64_t>(out.size()), nv);
    lp.insert(lp.end(), out.begin(), out.end());

    // The same two rows in two Steps; the decoder writes nothing.
    Step enc, dec;
    enc.rows = {TokenRow{toks[p], p, testing::seq_slot(r, split, p), false, -1}};
    enc.seqs = {StepSeq{0, 1, split.blocks}};
    dec.adapters = {&x_};
    dec.rows = {TokenRow{toks[p], p, -1, true, 0}};
    dec.seqs = {StepSeq{0, 1, split.blocks}};
    ASSERT_TRUE(r.runner->execute(enc, &out).is_ok());
    EXPECT_TRUE(out.empty());
    const KvGeometry& g = r.kv->geometry();
    const int32_t blk = split.blocks[p / bs], off = p % bs;
    std::vector<float> k_before(g.kv_dim()), k_after(g.kv_dim());
    r.kv->read_k(1, blk, off, k_before.data());
    ASSERT_TRUE(r.runner->execute(dec, &out).is_ok());
    ls.insert(ls.end(), out.begin(), out.end());
    r.kv->read_k(1, blk, off, k_after.data());
    EXPECT_EQ(k_before, k_after);

    // No sharing: a separate decoder model (merged weights) with its own copy
    // of the base-written K/V at 0..p.
    testing::copy_kv_blocks(*r.kv, *merged.kv, paired.blocks);
    Step ref;
    ref.rows = {TokenRow{toks[p], p, -1, true, -1}};
    ref.seqs = {StepSeq{0, 1, paired.blocks}};
    ASSERT_TRUE(merged.runner->execute(ref, &out).is_ok());
    lref.insert(lref.end(), out.begin(), out.end());
  }
  const double e_split = max_rel_err(lp, ls), e_ref = max_rel_err(lp, lref);
  std::printf("[ icarus paired ] %s: vs split steps %.3g, vs unshared reference %.3g\n", GetParam().c_str(), e_split,
              e_ref);
  EXPECT_LE(e_split, 3e-5);
  EXPECT_LE(e_ref, 1e-4);
  EXPECT_LE(max_rel_err(ls, lref), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Archs, RunnerAdapter, ::testing::Values("llama", "mistral", "qwen2", "qwen3", "gemma3"));

TEST(RunnerAdapterErrors, BadRowsAndAdaptersAreErrors) {
  SynthModelConfig c;
  std::string path = testing::write_synth_model(c);
  auto m = model_load_file(path, {});
  ASSERT_TRUE(m.is_ok());
  AdapterRig r = make_adapter_rig(*m, 4, 4);
  Adapter good = testing::random_adapter(**m, 4, 0.05, 3, "good");
  std::vector<float> logits;
  auto run = [&](const std::vector<const Adapter*>& adapters, int32_t row_adapter) {
    Step step;
    step.adapters = adapters;
    step.rows = {TokenRow{5, 0, 0, true, row_adapter}};
    step.seqs = {StepSeq{0, 1, {0}}};
    return r.runner->execute(step, &logits);
  };
  EXPECT_TRUE(run({&good}, 0).is_ok());
  EXPECT_TRUE(run({&good}, -1).is_ok());

  Status st = run({&good}, 1);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("adapter index 1"), std::string::npos) << st.message();
  EXPECT_EQ(run({}, 0).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(run({&good}, -2).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(run({nullptr}, -1).code(), ErrorCode::kInvalidArgument);

  Adapter short_one = good;
  short_one.layers.pop_back();
  st = run({&short_one}, 0);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("layers"), std::string::npos) << st.message();
  // Named but unused by any row: still checked.
  EXPECT_EQ(run({&good, &short_one}, 0).code(), ErrorCode::kInvalidArgument);

  Adapter wrong_dim = good;
  wrong_dim.layers[1].at(LoraTarget::kDown).d_in += 1;
  EXPECT_EQ(run({&wrong_dim}, 0).code(), ErrorCode::kInvalidArgument);
  Adapter short_b = good;
  short_b.layers[0].at(LoraTarget::kV).b.pop_back();
  EXPECT_EQ(run({&short_b}, 0).code(), ErrorCode::kInvalidArgument);
  Adapter neg_rank = good;
  neg_rank.layers[0].at(LoraTarget::kQ).rank = -3;
  EXPECT_EQ(run({&neg_rank}, 0).code(), ErrorCode::kInvalidArgument);

  // A negative slot is accepted, a wrong non-negative one is not.
  Step step;
  step.rows = {TokenRow{5, 0, 0, false, -1}, TokenRow{5, 0, -1, true, -1}};
  step.seqs = {StepSeq{0, 2, {0}}};
  EXPECT_TRUE(r.runner->execute(step, &logits).is_ok());
  step.rows[0].slot = 2;
  EXPECT_EQ(r.runner->execute(step, &logits).code(), ErrorCode::kInternal);
  EXPECT_TRUE(run({&good}, 0).is_ok());  // the runner still works
  std::remove(path.c_str());
}

}  // namespace
}  // namespace agentkv
