// synth_adapter_write on a tiny random base: the files load back, the output
// norm ratio is near its target, shared-A groups give bit-identical A.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "adapter/peft_loader.h"
#include "adapter/synth_adapter.h"
#include "adapter_test_util.h"

namespace agentkv {
namespace {

Model tiny_model() {
  Model m;
  m.spec = test::tiny_spec("qwen2");  // no permutation: B compares as written
  m.spec.d_model = 64, m.spec.n_heads = 4, m.spec.n_kv_heads = 2, m.spec.head_dim = 16, m.spec.ffn_dim = 96;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  auto dense = [&](int64_t rows, int64_t cols) {
    DenseTensor t;
    t.shape = {rows, cols};
    t.data.resize(static_cast<size_t>(rows * cols));
    for (float& v : t.data) v = nd(rng);
    return t;
  };
  const ModelSpec& s = m.spec;
  for (int32_t l = 0; l < s.n_layers; ++l) {
    LayerWeights w;
    w.wq = dense(s.q_dim(), s.d_model);
    w.wk = dense(s.kv_dim(), s.d_model);
    w.wv = dense(s.kv_dim(), s.d_model);
    w.wo = dense(s.d_model, s.q_dim());
    w.w_gate = dense(s.ffn_dim, s.d_model);
    w.w_up = dense(s.ffn_dim, s.d_model);
    w.w_down = dense(s.d_model, s.ffn_dim);
    m.w.layers.push_back(std::move(w));
  }
  return m;
}

std::string temp_dir(const std::string& tag) {
  return (std::filesystem::temp_directory_path() / ("agentkv_synth_" + std::to_string(::getpid()) + "_" + tag))
      .string();
}

TEST(SynthAdapter, LoadsBackWithTargetRatio) {
  const Model m = tiny_model();
  SynthAdapterConfig cfg;
  cfg.rank = 4;
  cfg.invocation_tokens = {1, 2, 3};
  const std::string dir = temp_dir("ratio");
  auto rep = synth_adapter_write(cfg, m, dir);
  ASSERT_TRUE(rep.is_ok()) << rep.status().message();
  for (LoraTarget t : kAllLoraTargets) {
    const double r = rep->mean_ratio[static_cast<int32_t>(t)];
    EXPECT_GT(r, 0.015) << lora_target_peft_name(t);
    EXPECT_LT(r, 0.045) << lora_target_peft_name(t);
  }
  auto a = load_peft_adapter(dir, m.spec, test::kTinyVocab);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_EQ(a->kind, AdapterKind::kAlora);
  EXPECT_EQ(a->invocation_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(a->rank, 4);
  EXPECT_FLOAT_EQ(a->layers[0].at(LoraTarget::kQ).scale, 2.0f);  // default alpha 2 * rank
  std::filesystem::remove_all(dir);
}

TEST(SynthAdapter, SharedAGroupIsBitIdenticalBDiffers) {
  const Model m = tiny_model();
  SynthAdapterConfig c1, c2, c3;
  c1.seed = 1, c2.seed = 2, c3.seed = 3;
  c1.shared_a_group = c2.shared_a_group = "team";
  c1.bf16 = c2.bf16 = c3.bf16 = true;
  std::vector<Adapter> as;
  for (auto* c : {&c1, &c2, &c3}) {
    const std::string dir = temp_dir("shared" + std::to_string(c->seed));
    ASSERT_TRUE(synth_adapter_write(*c, m, dir).is_ok());
    auto a = load_peft_adapter(dir, m.spec, test::kTinyVocab);
    ASSERT_TRUE(a.is_ok()) << a.status().message();
    as.push_back(std::move(a).value());
    std::filesystem::remove_all(dir);
  }
  for (int32_t l = 0; l < m.spec.n_layers; ++l) {
    for (LoraTarget t : kAllLoraTargets) {
      EXPECT_EQ(as[0].layers[l].at(t).a, as[1].layers[l].at(t).a) << "same group, same A";
      EXPECT_NE(as[0].layers[l].at(t).b, as[1].layers[l].at(t).b) << "B follows --seed";
      EXPECT_NE(as[0].layers[l].at(t).a, as[2].layers[l].at(t).a) << "no group: A follows --seed";
    }
  }
  EXPECT_NE(as[0].id, as[1].id);
}

TEST(SynthAdapter, TargetsAndErrors) {
  const Model m = tiny_model();
  SynthAdapterConfig cfg;
  cfg.targets.fill(false);
  cfg.targets[static_cast<int32_t>(LoraTarget::kV)] = true;
  const std::string dir = temp_dir("targets");
  auto rep = synth_adapter_write(cfg, m, dir);
  ASSERT_TRUE(rep.is_ok());
  EXPECT_LT(rep->mean_ratio[static_cast<int32_t>(LoraTarget::kQ)], 0);
  auto a = load_peft_adapter(dir, m.spec, test::kTinyVocab);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_TRUE(a->layers[0].at(LoraTarget::kQ).empty());
  EXPECT_FALSE(a->layers[0].at(LoraTarget::kV).empty());
  std::filesystem::remove_all(dir);
  cfg.rank = 1000;
  EXPECT_FALSE(synth_adapter_write(cfg, m, dir).is_ok());
}

}  // namespace
}  // namespace agentkv
