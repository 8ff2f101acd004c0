// Helpers for the multi-adapter runner tests (tests/unit/runtime and
// tests/e2e): random in-memory adapters with the magnitudes of a trained one,
// the merged model W + scale·B·A they must equal, and a small driver that runs
// several sequences' rows together or alone through a Runner.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "adapter/adapter.h"
#include "backend/backend.h"
#include "kv/block_pool.h"
#include "kv/kv_storage.h"
#include "model/weights.h"
#include "runtime/runner.h"

namespace agentkv::testing {

inline DenseTensor& target_weight(LayerWeights& w, LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ: return w.wq;
    case LoraTarget::kK: return w.wk;
    case LoraTarget::kV: return w.wv;
    case LoraTarget::kO: return w.wo;
    case LoraTarget::kGate: return w.w_gate;
    case LoraTarget::kUp: return w.w_up;
    case LoraTarget::kDown: return w.w_down;
  }
  return w.wq;
}

inline double frobenius(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

// A random adapter of `rank` on the modules in `targets` (LoraTarget indexes),
// scaled so that ||scale·B·A||_F = ratio · ||W||_F for each module: the delta
// output is about `ratio` of the base projection's, like a trained adapter
// (a few percent), not the zero delta of a fresh PEFT init.
inline Adapter random_adapter(const Model& m, int32_t rank, double ratio, uint32_t seed, const std::string& name,
                              std::vector<int32_t> targets = {0, 1, 2, 3, 4, 5, 6}) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Adapter a;
  a.name = name;
  a.id = name;
  a.rank = rank;
  a.layers.resize(m.w.layers.size());
  for (size_t l = 0; l < m.w.layers.size(); ++l) {
    for (int32_t t : targets) {
      const DenseTensor& w = target_weight(const_cast<LayerWeights&>(m.w.layers[l]), static_cast<LoraTarget>(t));
      LoraMatrix& lm = a.layers[l].m[t];
      lm.rank = rank;
      lm.d_out = w.shape.size() == 2 ? w.shape[0] : 0;
      lm.d_in = w.shape.size() == 2 ? w.shape[1] : 0;
      lm.scale = 16.0f / float(rank);  // lora_alpha 16
      lm.a.resize(size_t(rank * lm.d_in));
      lm.b.resize(size_t(lm.d_out * rank));
      for (auto& x : lm.a) x = nd(rng) / std::sqrt(float(lm.d_in));
      for (auto& x : lm.b) x = nd(rng);
      // ||B·A||_F^2 = sum_pq (B^T B)_pq (A A^T)_pq, without forming B·A.
      std::vector<double> btb(size_t(rank * rank), 0.0), aat(size_t(rank * rank), 0.0);
      for (int32_t p = 0; p < rank; ++p)
        for (int32_t q = 0; q < rank; ++q) {
          for (int64_t o = 0; o < lm.d_out; ++o) btb[p * rank + q] += double(lm.b[o * rank + p]) * lm.b[o * rank + q];
          for (int64_t i = 0; i < lm.d_in; ++i) aat[p * rank + q] += double(lm.a[p * lm.d_in + i]) * lm.a[q * lm.d_in + i];
        }
      double ba2 = 0;
      for (size_t i = 0; i < btb.size(); ++i) ba2 += btb[i] * aat[i];
      const double c = ratio * frobenius(w.data) / (lm.scale * std::sqrt(std::max(ba2, 1e-30)));
      for (auto& x : lm.b) x = float(x * c);
    }
  }
  return a;
}

// The base model with the adapter merged: W + scale·B·A in f32 (summed in
// double), packed copies cleared so every matmul reads the merged f32 weights.
inline std::shared_ptr<Model> merge_adapter(const Model& base, const Adapter& a) {
  auto m = std::make_shared<Model>(base);
  for (size_t l = 0; l < m->w.layers.size(); ++l) {
    for (int32_t t = 0; t < kLoraTargetCount; ++t) {
      DenseTensor& w = target_weight(m->w.layers[l], static_cast<LoraTarget>(t));
      w.packed.clear();
      w.packed_type = 0;
      w.packed_row_bytes = 0;
      const LoraMatrix& lm = a.layers[l].m[t];
      if (lm.empty()) continue;
      for (int64_t o = 0; o < lm.d_out; ++o)
        for (int64_t i = 0; i < lm.d_in; ++i) {
          double d = 0;
          for (int32_t q = 0; q < lm.rank; ++q) d += double(lm.b[o * lm.rank + q]) * lm.a[q * lm.d_in + i];
          float& x = w.data[size_t(o * lm.d_in + i)];
          x = float(double(x) + double(lm.scale) * d);
        }
    }
  }
  return m;
}

struct AdapterRig {
  std::shared_ptr<const Model> model;
  std::unique_ptr<backend_i> backend;
  std::unique_ptr<KvStorage> kv;
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<Runner> runner;
  int32_t block_size = 0;
};

inline AdapterRig make_adapter_rig(std::shared_ptr<const Model> model, int32_t block_size, int32_t n_blocks,
                                   int threads = 1) {
  AdapterRig r;
  r.model = std::move(model);
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

// One sequence driven by hand: its tokens, the adapter its rows use (null:
// base), its block table, and the logits of every row run so far.
struct TestSeq {
  TestSeq() = default;
  TestSeq(std::vector<int32_t> t, const Adapter* a) : toks(std::move(t)), adapter(a) {}

  std::vector<int32_t> toks;
  const Adapter* adapter = nullptr;
  std::vector<int32_t> blocks;
  int32_t n_past = 0;
  std::vector<float> logits;  // (rows run, n_vocab)
};

inline void seq_alloc(AdapterRig& r, TestSeq& q) {
  const int32_t need = (static_cast<int32_t>(q.toks.size()) + r.block_size - 1) / r.block_size;
  auto b = r.pool->allocate(need);
  ASSERT_TRUE(b.is_ok());
  q.blocks = *b;
}

inline int64_t seq_slot(const AdapterRig& r, const TestSeq& q, int32_t pos) {
  return int64_t{q.blocks[pos / r.block_size]} * r.block_size + pos % r.block_size;
}

inline int32_t adapter_index(Step& step, const Adapter* a) {
  if (a == nullptr) return -1;
  auto it = std::find(step.adapters.begin(), step.adapters.end(), a);
  if (it != step.adapters.end()) return static_cast<int32_t>(it - step.adapters.begin());
  step.adapters.push_back(a);
  return static_cast<int32_t>(step.adapters.size()) - 1;
}

// Runs the next n[i] tokens of every seqs[i] in one Step, every row with
// logits, and appends them to each sequence's logits.
inline void step_together(AdapterRig& r, const std::vector<TestSeq*>& seqs, const std::vector<int32_t>& n) {
  Step step;
  for (size_t i = 0; i < seqs.size(); ++i) {
    TestSeq& q = *seqs[i];
    const int32_t ai = adapter_index(step, q.adapter);
    StepSeq sq;
    sq.row_begin = static_cast<int32_t>(step.rows.size());
    for (int32_t p = q.n_past; p < q.n_past + n[i]; ++p)
      step.rows.push_back(TokenRow{q.toks[p], p, seq_slot(r, q, p), true, ai});
    sq.row_end = static_cast<int32_t>(step.rows.size());
    sq.blocks = q.blocks;
    step.seqs.push_back(sq);
  }
  std::vector<float> logits;
  Status st = r.runner->execute(step, &logits);
  ASSERT_TRUE(st.is_ok()) << st.message();
  const int64_t nv = r.model->spec.n_vocab;
  int64_t off = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i]->logits.insert(seqs[i]->logits.end(), logits.begin() + off * nv, logits.begin() + (off + n[i]) * nv);
    off += n[i];
    seqs[i]->n_past += n[i];
  }
}

// max |a - b| / max |b|: the error relative to the logits' scale.
inline double max_rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return num / std::max(den, 1e-30);
}

// Copies the K/V of `blocks` (every layer) from one storage to another of the
// same geometry: a decoder given its own copy of what the base wrote.
inline void copy_kv_blocks(KvStorage& from, KvStorage& to, const std::vector<int32_t>& blocks) {
  const KvGeometry& g = from.geometry();
  const size_t bytes = size_t(g.row_bytes());
  for (int32_t l = 0; l < g.n_layers; ++l)
    for (int32_t b : blocks)
      for (int32_t o = 0; o < g.block_size; ++o) {
        std::memcpy(to.k_at(l, b, o), from.k_at(l, b, o), bytes);
        std::memcpy(to.v_at(l, b, o), from.v_at(l, b, o), bytes);
      }
}

}  // namespace agentkv::testing
