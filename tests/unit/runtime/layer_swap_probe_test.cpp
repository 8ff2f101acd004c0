// LayerSwapProbe (runtime/layer_swap_probe.h) on a small random-weight model:
// an agent against itself moves nothing in any layer (the swapped K/V are
// its own, bit for bit); two agents that differ only in their q projection
// write the same layer-0 K/V (it depends on the embeddings and the k/v
// weights alone), so layer 0 moves nothing and layer 1 does, which pins the
// swapped layer to the one asked for; a prompt of the wrong length is an
// error.
#include "runtime/layer_swap_probe.h"

#include <gtest/gtest.h>

#include <random>

#include "../model/test_models.h"
#include "adapter_test_util.h"
#include "model/loader.h"

namespace agentkv {
namespace {

class LayerSwapProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::write_synth_model(testing::small_synth_config(23));
    ASSERT_FALSE(path_.empty());
    auto m = model_load_file(path_, {});
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    model_ = *m;
    std::mt19937 rng(4);
    for (int i = 0; i < 40; ++i) toks_.push_back(static_cast<int32_t>(rng() % 300));
  }
  void TearDown() override { std::remove(path_.c_str()); }

  std::string path_;
  std::shared_ptr<Model> model_;
  std::vector<int32_t> toks_;  // 40: two whole blocks of 16 and a part
};

TEST_F(LayerSwapProbeTest, AnAgentAgainstItselfMovesNothing) {
  const Adapter a = testing::random_adapter(*model_, 4, 0.05, 1, "a");
  auto probe = LayerSwapProbe::create(model_, 2, 40);
  ASSERT_TRUE(probe.is_ok()) << probe.status().message();
  std::vector<double> s(2, 0.0);
  ASSERT_TRUE((*probe)->add_sensitivity(toks_, a, a, 20, &s).is_ok());
  EXPECT_EQ(s, std::vector<double>({0.0, 0.0}));
}

TEST_F(LayerSwapProbeTest, TheSwappedLayerIsTheOneAskedFor) {
  const Adapter p = testing::random_adapter(*model_, 4, 0.3, 1, "p", {0});  // q only
  const Adapter c = testing::random_adapter(*model_, 4, 0.3, 2, "c", {0});
  auto probe = LayerSwapProbe::create(model_, 1, 40);
  ASSERT_TRUE(probe.is_ok());
  std::vector<double> s(2, 0.0);
  ASSERT_TRUE((*probe)->add_sensitivity(toks_, p, c, 20, &s).is_ok());
  EXPECT_EQ(s[0], 0.0);
  EXPECT_GT(s[1], 0.0);
  // Added to what is there, not overwritten: a second call doubles it.
  const std::vector<double> once = s;
  ASSERT_TRUE((*probe)->add_sensitivity(toks_, p, c, 20, &s).is_ok());
  EXPECT_EQ(s[1], 2 * once[1]);
}

TEST_F(LayerSwapProbeTest, APromptOfAnotherLengthIsAnError) {
  const Adapter a = testing::random_adapter(*model_, 4, 0.05, 1, "a");
  auto probe = LayerSwapProbe::create(model_, 1, 40);
  ASSERT_TRUE(probe.is_ok());
  std::vector<double> s(2, 0.0);
  const std::vector<int32_t> short_prompt(toks_.begin(), toks_.begin() + 39);
  const Status st = (*probe)->add_sensitivity(short_prompt, a, a, 20, &s);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("39 tokens, made for 40"), std::string::npos) << st.message();
  EXPECT_FALSE(LayerSwapProbe::create(model_, 1, 0).is_ok());
}

}  // namespace
}  // namespace agentkv
