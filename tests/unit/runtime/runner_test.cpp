// The runner on small random-weight models: the same tokens must give the same
// logits however the work is cut into Steps (chunked prefill, token by token,
// several sequences in one Step, any block size). Agreement with an independent
// reference is tests/python/test_logits.py.
#include "runtime/runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "../model/test_models.h"
#include "kv/block_pool.h"
#include "model/loader.h"

namespace agentkv {
namespace {

struct Rig {
  std::shared_ptr<Model> model;
  std::unique_ptr<backend_i> backend;
  std::unique_ptr<KvStorage> kv;
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<Runner> runner;
  int32_t block_size;
};

Rig make_rig(const std::string& path, int32_t block_size, int32_t n_blocks, int threads = 1) {
  Rig r;
  auto m = model_load_file(path, {});
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  r.model = *m;
  r.backend = backend_cpu_init(BackendConfig{threads});
  const ModelSpec& s = r.model->spec;
  auto kv = KvStorage::create({s.n_layers, s.n_kv_heads, s.head_dim, block_size}, n_blocks);
  EXPECT_TRUE(kv.is_ok());
  r.kv = std::make_unique<KvStorage>(std::move(kv).value());
  r.pool = std::make_unique<BlockPool>(n_blocks);
  r.runner = std::make_unique<Runner>(r.model, r.backend.get(), r.kv.get());
  r.block_size = block_size;
  return r;
}

std::vector<int32_t> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 300);
  return t;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return num / std::max(den, 1e-30);
}

// Runs toks as one sequence from position 0, in Steps of at most `ubatch`
// rows over fresh blocks from the pool; returns the last token's logits.
std::vector<float> run_sequence(Rig& r, const std::vector<int32_t>& toks, int32_t ubatch) {
  const int32_t bs = r.block_size;
  const int32_t n = static_cast<int32_t>(toks.size());
  auto blocks = r.pool->allocate((n + bs - 1) / bs);
  EXPECT_TRUE(blocks.is_ok());
  if (!blocks.is_ok()) return {};
  std::vector<float> logits;
  for (int32_t begin = 0; begin < n; begin += ubatch) {
    Step step;
    for (int32_t pos = begin; pos < std::min(n, begin + ubatch); ++pos) {
      step.rows.push_back(
          TokenRow{toks[pos], pos, int64_t{(*blocks)[pos / bs]} * bs + pos % bs, pos + 1 == n});
    }
    step.seqs = {StepSeq{0, static_cast<int32_t>(step.rows.size()), *blocks}};
    EXPECT_TRUE(r.runner->execute(step, &logits).is_ok());
  }
  r.pool->release(*blocks);
  return logits;
}

class RunnerArch : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SynthModelConfig c;
    c.arch = GetParam();
    c.n_layers = 2, c.d_model = 64, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_dim = 96, c.seed = 11;
    c.init_std = 0.08f;  // large enough that attention patterns are far from uniform
    path_ = testing::write_synth_model(c);
    ASSERT_FALSE(path_.empty());
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

TEST_P(RunnerArch, ChunkedPrefillAndDecodeMatchOneShot) {
  Rig r = make_rig(path_, 16, 64);
  auto toks = tokens(53, 1);
  auto ref = run_sequence(r, toks, 512);
  ASSERT_EQ(ref.size(), 300u);
  for (int32_t ub : {1, 7, 16, 17}) {
    EXPECT_LT(max_rel_diff(run_sequence(r, toks, ub), ref), 1e-5) << "ubatch " << ub;
  }
}

TEST_P(RunnerArch, BlockSizeDoesNotChangeLogits) {
  auto toks = tokens(40, 2);
  Rig r16 = make_rig(path_, 16, 16);
  auto ref = run_sequence(r16, toks, 512);
  for (int32_t bs : {1, 5, 32, 64}) {
    Rig r = make_rig(path_, bs, (64 + bs - 1) / bs + 2);
    EXPECT_LT(max_rel_diff(run_sequence(r, toks, 9), ref), 1e-5) << "block size " << bs;
  }
}

TEST_P(RunnerArch, ThreadCountDoesNotChangeLogits) {
  auto toks = tokens(37, 3);
  Rig r1 = make_rig(path_, 16, 16, 1);
  Rig r2 = make_rig(path_, 16, 16, 2);
  EXPECT_LT(max_rel_diff(run_sequence(r2, toks, 512), run_sequence(r1, toks, 512)), 1e-5);
}

TEST_P(RunnerArch, BatchedSequencesMatchEachAlone) {
  Rig r = make_rig(path_, 8, 64);
  std::vector<std::vector<int32_t>> seqs = {tokens(5, 10), tokens(23, 11), tokens(1, 12), tokens(16, 13)};
  std::vector<std::vector<float>> alone;
  for (auto& s : seqs) alone.push_back(run_sequence(r, s, 512));

  // One Step with all four sequences, in shuffled block ids.
  Step step;
  std::vector<std::vector<int32_t>> tables;
  auto blocks = r.pool->allocate(3 + 1 + 3 + 1 + 2);  // enough for every sequence
  ASSERT_TRUE(blocks.is_ok());
  std::vector<int32_t> ids = *blocks;
  std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
  size_t next = 0;
  for (auto& s : seqs) {
    StepSeq q;
    q.row_begin = static_cast<int32_t>(step.rows.size());
    int need = (static_cast<int>(s.size()) + 7) / 8;
    q.blocks.assign(ids.begin() + next, ids.begin() + next + need);
    next += need;
    for (size_t i = 0; i < s.size(); ++i) {
      int32_t pos = static_cast<int32_t>(i);
      step.rows.push_back({s[i], pos, int64_t{q.blocks[pos / 8]} * 8 + pos % 8, i + 1 == s.size()});
    }
    q.row_end = static_cast<int32_t>(step.rows.size());
    step.seqs.push_back(q);
  }
  std::vector<float> logits;
  ASSERT_TRUE(r.runner->execute(step, &logits).is_ok());
  ASSERT_EQ(logits.size(), 4u * 300);
  for (size_t s = 0; s < seqs.size(); ++s) {
    std::vector<float> mine(logits.begin() + s * 300, logits.begin() + (s + 1) * 300);
    EXPECT_LT(max_rel_diff(mine, alone[s]), 1e-5) << "sequence " << s;
  }
  r.pool->release(*blocks);
}

INSTANTIATE_TEST_SUITE_P(Archs, RunnerArch, ::testing::Values("llama", "mistral", "qwen2", "qwen3", "gemma3"));

// Decode-sized steps read the packed (quantized) weights, prefill the f32
// copies: both must give the same logits for a quantized model.
TEST(Runner, PackedDecodeMatchesDequantizedPrefill) {
  SynthModelConfig c = testing::small_synth_config(3);
  c.type = GgmlType::kQ8_0;
  std::string path = testing::write_synth_model(c);
  Rig r = make_rig(path, 16, 16);
  ASSERT_FALSE(r.model->w.layers[0].wq.packed.empty());
  auto toks = tokens(30, 4);
  auto prefill = run_sequence(r, toks, 512);  // 30 rows: f32 GEMM, then the last row's logits
  auto decode = run_sequence(r, toks, 1);     // 1 row per step: packed weights throughout
  EXPECT_LT(max_rel_diff(decode, prefill), 1e-5);
  std::remove(path.c_str());
}

TEST(Runner, RejectsBadSteps) {
  SynthModelConfig c;
  std::string path = testing::write_synth_model(c);
  Rig r = make_rig(path, 4, 4);
  std::vector<float> logits;
  Step step;
  step.rows = {{999, 0, 0, true}};  // token outside the 300-token vocabulary
  step.seqs = {{0, 1, {0}}};
  Status st = r.runner->execute(step, &logits);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos);
  step.rows = {{5, 0, 3, true}};  // slot 3 is not where position 0 of block 0 lives
  EXPECT_EQ(r.runner->execute(step, &logits).code(), ErrorCode::kInternal);
  step.rows = {{5, 4, 4, true}};  // position beyond a one-block table
  EXPECT_EQ(r.runner->execute(step, &logits).code(), ErrorCode::kInternal);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace agentkv
