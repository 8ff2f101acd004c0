// Segment reuse anywhere in a prompt on the real model, through the serving
// engine (issue "Partial recomputation"): a cached document is found at any
// offset of a new prompt and in the generated tokens of an earlier request,
// never across namespaces; naive, epic, cacheblend and sparsex run on it;
// and the exact limits (cacheblend and sparsex at ratio 1.0, sparsex with its
// boundary at the layer count, epic with N >= the segment length) give the logits of full recomputation, bit for bit (the same rows as a
// dense prefill, and the kernels are batch-invariant). Skipped when the
// model file is absent (failed under CI).
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "../ci_required.h"
#include "agentkv/serving.h"
#include "serving_util.h"
#include "sharing/scheme.h"

namespace agentkv {
namespace {

using namespace agentkv::testing;

constexpr int32_t kBs = 16;

class Reuse : public ::testing::Test {
 public:  // check_selection_once uses the helpers
  void SetUp() override {
    AGENTKV_REQUIRE(!std::filesystem::exists(model_path()), "model not found: " << model_path());
  }
  std::unique_ptr<ServingEngine> make(const std::string& scheme, bool prefix_caching = true, int64_t kv_mb = 64,
                                      int32_t budget = 2048) {
    ServingOptions o;
    o.model_path = model_path();
    o.n_threads = 2;
    o.block_size = kBs;
    o.kv_cache_mb = kv_mb;
    o.max_batch_tokens = budget;
    o.prefix_caching = prefix_caching;
    o.kv_sharing = scheme;
    auto e = create_serving_engine(o);
    EXPECT_TRUE(e.is_ok()) << e.status().message();
    return e.is_ok() ? std::move(e).value() : nullptr;
  }
  static ServeRequest req(std::vector<int32_t> prompt, int max_tokens, KvSharingParams p = {}) {
    ServeRequest r = greedy_request(std::move(prompt), max_tokens);
    r.kv_sharing_params = p;
    return r;
  }
  Outcome one(ServingEngine& e, ServeRequest r) {
    std::vector<ServeRequest> v;
    v.push_back(std::move(r));
    return serve_requests(e, std::move(v))[0];
  }
};

TEST_F(Reuse, DocumentFoundAtAnyOffsetAndOnlyInItsNamespace) {
  auto eng = make("naive");
  ASSERT_TRUE(eng);
  const auto d = doc(1, 80);
  one(*eng, req(cat({doc(2, 5), d}), 1));  // caches d at offset 5
  std::mt19937 rng(3);
  std::vector<int> offsets = {0, 1, 7, 16, 33};
  for (int i = 0; i < 3; ++i) offsets.push_back(1 + static_cast<int>(rng() % 200));
  for (int off : offsets) {
    const auto prompt = cat({doc(100 + off, off), d, doc(4, 9)});
    const Outcome o = one(*eng, req(prompt, 2));
    EXPECT_TRUE(o.error.empty()) << o.error;
    // Every full source block of d (80 tokens at offset 5: blocks 1..4 hold
    // positions 16..79, all d) plus token-granular edges where they match.
    EXPECT_GE(o.reused, 64) << "offset " << off << " cached " << o.cached;
    EXPECT_LE(o.reused, 80) << "offset " << off;
    // Another tenant, another cache_salt: nothing. (Fresh names each time:
    // these requests cache d in their own namespace.)
    ServeRequest t = req(prompt, 1);
    t.tenant = "other-" + std::to_string(off);
    EXPECT_EQ(one(*eng, std::move(t)).reused, 0) << "offset " << off;
    ServeRequest s = req(prompt, 1);
    s.cache_salt = "salt-" + std::to_string(off);
    EXPECT_EQ(one(*eng, std::move(s)).reused, 0) << "offset " << off;
  }
}

TEST_F(Reuse, GeneratedTokensOfAnEarlierRequestAreFound) {
  auto eng = make("naive");
  ASSERT_TRUE(eng);
  const Outcome g = one(*eng, req(doc(5, 40), 72));  // greedy, EOS ignored
  ASSERT_EQ(g.tokens.size(), 72u);
  // The generated tokens sit at positions 40..111: full blocks 3..6 (48..111)
  // are committed except the last token's, which has no K/V yet.
  const std::vector<int32_t> gen(g.tokens.begin(), g.tokens.begin() + 70);
  const Outcome o = one(*eng, req(cat({doc(6, 7), gen, doc(7, 5)}), 1));
  EXPECT_GE(o.reused, 48);
}

TEST_F(Reuse, PrefixHitsTakePrecedence) {
  auto eng = make("naive");
  ASSERT_TRUE(eng);
  const auto d = doc(8, 96);
  one(*eng, req(cat({d, doc(9, 4)}), 1));
  const Outcome o = one(*eng, req(cat({d, doc(10, 20)}), 1));
  EXPECT_EQ(o.cached, 96);  // six full blocks from the prefix cache
  EXPECT_EQ(o.reused, 0);   // nothing left to reuse behind the prefix hit
}

// The exact limits on 20 multi-document prompts whose documents were cached
// alone, in another order: cacheblend and sparsex at ratio 1.0, sparsex with
// every layer dense and epic with N larger than any segment recompute every
// token, so the result is full prefill's.
TEST_F(Reuse, ExactLimitsEqualFullRecomputation) {
  auto ref_eng = make("none", /*prefix_caching=*/false);
  auto eng = make("none");
  ASSERT_TRUE(ref_eng && eng);
  KvSharingParams blend_all;
  blend_all.ratio = 1.0;
  KvSharingParams epic_all;
  epic_all.recompute_tokens = 100000;
  KvSharingParams sparsex_dense;
  sparsex_dense.boundary_layer = 30;  // SmolLM2's layer count
  int64_t reused = 0;
  for (uint32_t i = 0; i < 20; ++i) {
    std::vector<std::vector<int32_t>> docs;
    for (uint32_t j = 0; j < 3; ++j) docs.push_back(doc(1000 + 10 * i + j, 64 + 8 * ((i + j) % 4)));
    for (int j = 2; j >= 0; --j) one(*eng, req(cat({doc(7, 3), docs[j]}), 1));  // cached alone, reversed order
    const auto prompt = cat({doc(11, 6), docs[0], docs[1], docs[2], doc(12 + i, 12)});
    const Outcome ref = one(*ref_eng, req(prompt, 4));
    ServeRequest b = req(prompt, 4, blend_all);
    b.kv_sharing = "cacheblend";
    const Outcome ob = one(*eng, std::move(b));
    ServeRequest e = req(prompt, 4, epic_all);
    e.kv_sharing = "epic";
    const Outcome oe = one(*eng, std::move(e));
    ServeRequest sr = req(prompt, 4, blend_all);
    sr.kv_sharing = "sparsex";
    const Outcome osr = one(*eng, std::move(sr));
    ServeRequest sl = req(prompt, 4, sparsex_dense);
    sl.kv_sharing = "sparsex";
    const Outcome osl = one(*eng, std::move(sl));
    expect_same(ob, ref, "cacheblend ratio 1.0, prompt " + std::to_string(i));
    expect_same(oe, ref, "epic N=100000, prompt " + std::to_string(i));
    expect_same(osr, ref, "sparsex ratio 1.0, prompt " + std::to_string(i));
    expect_same(osl, ref, "sparsex boundary_layer 30, prompt " + std::to_string(i));
    reused += ob.reused + oe.reused + osr.reused + osl.reused;
    // The approximate K/V was never indexed: the same prompt under none is a
    // plain computation again (no prefix hit past the shared head).
    if (i == 0) {
      EXPECT_LE(one(*eng, req(prompt, 1)).cached, 16);
    }
  }
  EXPECT_GT(reused, 20 * 4 * 64);  // the copies happened (and were overwritten)
}

TEST_F(Reuse, SchemesRunAndReportReuse) {
  auto eng = make("none");
  ASSERT_TRUE(eng);
  // Documents longer than epic's default 64 recomputed leading tokens.
  const auto d1 = doc(20, 150), d2 = doc(21, 150);
  one(*eng, req(cat({doc(22, 2), d1}), 1));
  one(*eng, req(cat({doc(23, 9), d2}), 1));
  const auto prompt = cat({doc(24, 5), d2, d1, doc(25, 10)});
  for (const char* scheme : {"naive", "epic", "cacheblend", "sparsex"}) {
    ServeRequest r = req(prompt, 8);
    r.kv_sharing = scheme;
    const Outcome o = one(*eng, std::move(r));
    EXPECT_TRUE(o.error.empty()) << scheme << ": " << o.error;
    EXPECT_EQ(o.tokens.size(), 8u) << scheme;
    EXPECT_GE(o.reused, 96) << scheme;
    // The prefill's K/V entries: naive computes only the tokens it did not
    // reuse, in all 30 layers; cacheblend all tokens in layers 0 and 1;
    // sparsex all tokens in layers 0 to its boundary (0 by default).
    const int64_t n = static_cast<int64_t>(prompt.size());
    const std::string s = scheme;
    if (s == "naive") {
      EXPECT_EQ(o.prefill_token_layers, (n - o.reused) * 30);
    } else if (s == "cacheblend") {
      EXPECT_GE(o.prefill_token_layers, n * 2 + (n - o.reused) * 28);
    } else if (s == "sparsex") {
      EXPECT_GE(o.prefill_token_layers, n * (kSparsexDefaultBoundaryLayer + 1) +
                                            (n - o.reused) * (29 - kSparsexDefaultBoundaryLayer));
    }
    EXPECT_LT(o.prefill_token_layers, n * 30) << scheme;
  }
  // A plain request computes every entry.
  EXPECT_EQ(one(*eng, req(doc(26, 50), 1)).prefill_token_layers, 50 * 30);
  const ServingStats st = eng->stats();
  EXPECT_GT(st.reused_tokens_by_scheme.at("naive"), 0);
  // naive computes fewer K/V entries than cacheblend, which computes fewer than none would.
  EXPECT_LT(st.computed_token_layers_by_scheme.at("naive"), st.computed_token_layers_by_scheme.at("cacheblend"));
}

// sparsex and cacheblend select once over the whole prompt however the
// scheduler chunks it (SeqPlanner::whole_prompt_layer): in chunks of
// `budget` tokens, the earlier chunks run up to the selection layer and
// wait; the last one plans every position. Its rows exceed the budget here,
// so they stop above the selection and the kept ones run in later steps.
// The result equals the one-chunk run bit for bit, at the same cost (a
// selection at layer 0 runs layer 0 twice for the earlier chunks'
// positions), and no step computes more than `budget` tokens of all layers.
// Each layer in `layers`: 1 is cacheblend's check layer, the others
// sparsex's boundary.
void check_selection_once(Reuse& t, uint32_t prompts, std::initializer_list<int32_t> layers, int32_t doc_len,
                          int32_t budget) {
  auto one_chunk = t.make("none", true, 64, /*budget=*/2048);
  auto chunked = t.make("none", true, 64, budget);
  ASSERT_TRUE(one_chunk && chunked);
  for (uint32_t i = 0; i < prompts; ++i) {
    std::vector<std::vector<int32_t>> docs;
    for (uint32_t j = 0; j < 3; ++j) docs.push_back(doc(2000 + 10 * i + j, doc_len + 8 * ((i + j) % 3)));
    const auto prompt = cat({doc(60 + i, 6), docs[0], docs[1], docs[2], doc(70 + i, 12)});
    for (int32_t layer : layers) {
      const char* scheme = layer == 1 ? "cacheblend" : "sparsex";
      const std::string what =
          "prompt " + std::to_string(i) + ", " + scheme + " selecting at layer " + std::to_string(layer);
      KvSharingParams p;
      if (layer != 1) p.boundary_layer = layer;
      std::vector<Outcome> out;
      for (ServingEngine* e : {one_chunk.get(), chunked.get()}) {
        const std::string salt = what;  // a fresh namespace per run: the same cache state in both engines
        for (int j = 2; j >= 0; --j) {
          ServeRequest c = Reuse::req(cat({doc(7, 3), docs[j]}), 1);
          c.cache_salt = salt;
          t.one(*e, std::move(c));
        }
        ServeRequest r = Reuse::req(prompt, 4, p);
        r.kv_sharing = scheme;
        r.cache_salt = salt;
        out.push_back(t.one(*e, std::move(r)));
      }
      expect_same(out[1], out[0], what);
      EXPECT_LE(chunked->stats().max_step_token_layers, int64_t{budget} * 30) << what;
      EXPECT_GE(out[0].reused, 2 * doc_len) << what;
      EXPECT_EQ(out[1].reused, out[0].reused) << what;
      const int64_t extra = out[1].prefill_token_layers - out[0].prefill_token_layers;
      if (layer > 0) {
        EXPECT_EQ(extra, 0) << what;
      } else {  // the earlier chunks' positions ran layer 0 twice: whole chunks
        EXPECT_GE(extra, static_cast<int64_t>(prompt.size()) / budget * budget - budget) << what;
        EXPECT_LT(extra, static_cast<int64_t>(prompt.size())) << what;
        EXPECT_EQ(extra % budget, 0) << what;
      }
    }
  }
}

TEST_F(Reuse, SelectionIsOnceOverAChunkedPrompt) {
  check_selection_once(*this, /*prompts=*/2, {5, 0, 1}, /*doc_len=*/80, /*budget=*/64);
}

// The same on one short prompt, for the ASan stage (the one above takes
// minutes there): the engine's deferral path, its hidden states kept per
// position and resumed.
TEST_F(Reuse, SelectionIsOnceOverAChunkedPromptSmall) {
  check_selection_once(*this, /*prompts=*/1, {5}, /*doc_len=*/40, /*budget=*/32);
}

// Under memory pressure and chunked prefill, sources evicted between the
// lookup (first chunk) and the copy (a later chunk) are recomputed: the
// request never fails.
TEST_F(Reuse, EvictedSourcesFallBackToRecomputation) {
  auto eng = make("naive", true, /*kv_mb=*/10, /*budget=*/32);  // 13 blocks of 16 tokens
  ASSERT_TRUE(eng);
  const auto d = doc(30, 96);
  for (int round = 0; round < 4; ++round) {
    one(*eng, req(cat({doc(31 + round, 3), d}), 1));
    std::vector<ServeRequest> rs;
    for (int k = 0; k < 3; ++k) rs.push_back(req(cat({doc(40 + k, 1 + 5 * k), d, doc(50 + k, 8)}), 3));
    for (const Outcome& o : serve_requests(*eng, std::move(rs))) {
      EXPECT_TRUE(o.error.empty()) << o.error;
      EXPECT_EQ(o.tokens.size(), 3u);
    }
  }
}

TEST_F(Reuse, BadSchemeParametersAreInvalidArguments) {
  auto eng = make("none");
  ASSERT_TRUE(eng);
  auto submit = [&](const std::string& scheme, KvSharingParams p) {
    ServeRequest r = req(doc(60, 10), 1, p);
    r.kv_sharing = scheme;
    auto id = eng->submit(std::move(r), [](ServeEvent&&) {});
    if (id.is_ok()) eng->cancel(*id);
    return id.is_ok() ? ErrorCode::kOk : id.status().code();
  };
  KvSharingParams p;
  EXPECT_EQ(submit("blend", p), ErrorCode::kInvalidArgument);
  p.ratio = 1.5;
  EXPECT_EQ(submit("cacheblend", p), ErrorCode::kInvalidArgument);
  p.ratio = -0.1;
  EXPECT_EQ(submit("cacheblend", p), ErrorCode::kInvalidArgument);
  p.ratio = 0.3;
  EXPECT_EQ(submit("naive", p), ErrorCode::kInvalidArgument);
  EXPECT_EQ(submit("none", p), ErrorCode::kInvalidArgument);
  EXPECT_EQ(submit("cacheblend", p), ErrorCode::kOk);
  p = {};
  p.recompute_tokens = -1;
  EXPECT_EQ(submit("epic", p), ErrorCode::kInvalidArgument);
  p.recompute_tokens = 4;
  EXPECT_EQ(submit("cacheblend", p), ErrorCode::kInvalidArgument);
  EXPECT_EQ(submit("epic", p), ErrorCode::kOk);
  p = {};
  p.check_layer = 0;
  EXPECT_EQ(submit("cacheblend", p), ErrorCode::kInvalidArgument);
  p = {};
  p.min_segment_tokens = 0;
  EXPECT_EQ(submit("naive", p), ErrorCode::kInvalidArgument);
  p = {};
  p.boundary_layer = -1;
  EXPECT_EQ(submit("sparsex", p), ErrorCode::kInvalidArgument);
  p.boundary_layer = 0;
  EXPECT_EQ(submit("sparsex", p), ErrorCode::kOk);
  EXPECT_EQ(submit("cacheblend", p), ErrorCode::kInvalidArgument);
  p = {};
  p.tail_tokens = -5;
  EXPECT_EQ(submit("sparsex", p), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace agentkv
