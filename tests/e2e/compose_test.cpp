// Composed schemes on the real model (docs/design.md §3, "Schemes compose"): an
// exact adapter scheme (alora, icarus) with a segment-reuse scheme on one
// request. Without a reusable segment the composition is the exact scheme,
// bit for bit; at the reuse scheme's exact limit (ratio 1.0) it is full
// recomputation, bit for bit, while its copies come from documents the base
// model cached (which the reuse scheme alone cannot use for an adapter);
// whole-prompt selection over a chunked prompt gives the one-chunk result,
// ICaRus decoder rows included. Skipped when the model file is absent
// (failed under CI).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../ci_required.h"
#include "adapter/synth_adapter.h"
#include "agentkv/serving.h"
#include "runtime/loaded_model.h"
#include "serving_util.h"
#include "tokenizer/tokenizer.h"

namespace agentkv {
namespace {

using namespace agentkv::testing;

constexpr int32_t kBs = 16;
constexpr int64_t kLayers = 30;  // SmolLM2-135M

class Compose : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(model_path())) return;
    auto lm = load_model_file(model_path(), 2);
    ASSERT_TRUE(lm.is_ok()) << lm.status().message();
    dir_ = std::filesystem::temp_directory_path() / ("agentkv_compose_" + std::to_string(::getpid()));
    invocation_ = lm->tokenizer->encode("<|im_start|>assistant\nVerdict:", false, true);
    ASSERT_FALSE(invocation_.empty());
    write_synth_adapters(*lm->model, dir_.string(), {{"alora", 13}, {"icarus_1", 21}, {"icarus_2", 22}},
                         invocation_);
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    AGENTKV_REQUIRE(!std::filesystem::exists(model_path()), "model not found: " << model_path());
  }

  std::unique_ptr<ServingEngine> make(bool prefix_caching, int32_t budget = 2048) {
    ServingOptions o;
    o.model_path = model_path();
    o.n_threads = 2;
    o.kv_cache_mb = 64;
    o.block_size = kBs;
    o.max_batch_tokens = budget;
    o.prefix_caching = prefix_caching;
    o.adapters.push_back({"alora", (dir_ / "alora").string(), ""});
    for (const char* n : {"icarus_1", "icarus_2"}) o.adapters.push_back({n, (dir_ / n).string(), "icarus"});
    auto e = create_serving_engine(o);
    EXPECT_TRUE(e.is_ok()) << e.status().message();
    return e.is_ok() ? std::move(e).value() : nullptr;
  }

  static Outcome ask(ServingEngine& eng, std::vector<int32_t> prompt, const std::string& adapter,
                     const std::string& scheme, KvSharingParams p = {}, const std::string& salt = "") {
    ServeRequest r = greedy_request(std::move(prompt), 6);
    r.adapter = adapter;
    r.kv_sharing = scheme;
    r.kv_sharing_params = p;
    r.cache_salt = salt;
    auto out = serve_requests(eng, {std::move(r)});
    EXPECT_EQ(out[0].error, "") << adapter << " under " << scheme;
    return out[0];
  }

  // The base model caches each document alone, behind a short preamble
  // (so the documents sit at other offsets than in the prompts below).
  static void cache_docs(ServingEngine& eng, const std::vector<std::vector<int32_t>>& docs,
                         const std::string& salt = "") {
    for (const auto& d : docs) ask(eng, cat({doc(7, 3), d}), "", "none", {}, salt);
  }

  // A prompt that reads the documents; an aLoRA prompt ends in the invocation.
  static std::vector<int32_t> prompt_of(const std::vector<std::vector<int32_t>>& docs, uint32_t seed) {
    std::vector<int32_t> p = doc(seed, 6);
    for (const auto& d : docs) p.insert(p.end(), d.begin(), d.end());
    const std::vector<int32_t> q = doc(seed + 1, 12);
    p.insert(p.end(), q.begin(), q.end());
    p.insert(p.end(), invocation_.begin(), invocation_.end());
    return p;
  }

  static inline std::filesystem::path dir_;
  static inline std::vector<int32_t> invocation_;
};

struct Team {
  const char* exact;
  const char* adapter;
};
constexpr Team kTeams[] = {{"alora", "alora"}, {"icarus", "icarus_2"}};

TEST_F(Compose, WithoutASegmentTheCompositionIsTheExactScheme) {
  for (const Team& t : kTeams) {
    const std::string composed = std::string(t.exact) + "+sparsex";
    std::vector<Outcome> out;
    for (const std::string& scheme : {std::string(t.exact), composed}) {
      auto eng = make(true);
      ASSERT_TRUE(eng);
      // The base computes the shared context; the adapter's prompt extends it
      // with tokens no one cached.
      const std::vector<int32_t> context = doc(100, 90);
      ask(*eng, context, "", "none");
      const Outcome o = ask(*eng, cat({context, doc(101, 40), invocation_}), t.adapter, scheme);
      EXPECT_EQ(o.reused, 0) << scheme;
      EXPECT_EQ(o.cached, 80) << scheme << ": the exact prefix sharing with the base stays";
      out.push_back(o);
    }
    expect_same(out[1], out[0], composed + " without a segment vs " + t.exact);
  }
}

TEST_F(Compose, AtRatioOneTheCompositionIsFullRecomputation) {
  const std::vector<std::vector<int32_t>> docs = {doc(200, 72), doc(201, 80)};
  const std::vector<int32_t> prompt = prompt_of(docs, 210);
  auto reference = make(/*prefix_caching=*/false);
  auto eng = make(true);
  ASSERT_TRUE(reference && eng);
  cache_docs(*eng, docs);
  KvSharingParams all;
  all.ratio = 1.0;
  for (const Team& t : kTeams) {
    const Outcome ref = ask(*reference, prompt, t.adapter, t.exact);
    for (const char* reuse : {"sparsex", "cacheblend"}) {
      const std::string composed = std::string(t.exact) + "+" + reuse;
      const Outcome o = ask(*eng, prompt, t.adapter, composed, all);
      // Every full block of both documents, copied from the base's cache.
      EXPECT_GE(o.reused, 128) << composed;
      EXPECT_EQ(o.prefill_token_layers, static_cast<int64_t>(prompt.size() - o.cached) * kLayers +
                                            (std::string(t.exact) == "icarus" ? kLayers : 0))
          << composed << ": every row in every layer (and ICaRus's decoder row)";
      expect_same(o, ref, composed + " at ratio 1.0 vs full recomputation");
    }
    // The reuse scheme alone keeps the adapter in its own lineage: the base's documents are not its.
    EXPECT_EQ(ask(*eng, prompt, t.adapter, "sparsex").reused, 0) << t.adapter;
  }
}

TEST_F(Compose, AtItsDefaultsTheCompositionReusesTheBasesDocuments) {
  const std::vector<std::vector<int32_t>> docs = {doc(300, 80), doc(301, 80), doc(302, 64)};
  const std::vector<int32_t> prompt = prompt_of(docs, 310);
  auto eng = make(true);
  ASSERT_TRUE(eng);
  const int64_t n = static_cast<int64_t>(prompt.size());
  for (const Team& t : kTeams) {
    for (const char* reuse : {"naive", "epic", "cacheblend", "sparsex"}) {
      // Each in a namespace of its own, so no composed run reads another's K/V.
      const std::string composed = std::string(t.exact) + "+" + reuse;
      cache_docs(*eng, docs, composed);
      const Outcome o = ask(*eng, prompt, t.adapter, composed, {}, composed);
      EXPECT_EQ(o.tokens.size(), 6u) << composed;
      // The full source blocks of each document (64, 64 and 48 tokens) at least.
      EXPECT_GE(o.reused, 176) << composed;
      // Less than the exact scheme alone or the reuse scheme alone, which both
      // compute every entry here (nothing of the prompt is the adapter's
      // prefix, and the base's documents are not in its lineage); naive
      // exactly what it did not copy (and ICaRus's decoder row).
      const int64_t decoder = std::string(t.exact) == "icarus" ? kLayers : 0;
      if (std::string(reuse) == "naive") {
        EXPECT_EQ(o.prefill_token_layers, (n - o.reused) * kLayers + decoder) << composed;
      }
      EXPECT_LT(o.prefill_token_layers, n * kLayers) << composed;
    }
  }
  const ServingStats st = eng->stats();
  EXPECT_GT(st.reused_tokens_by_scheme.at("alora+sparsex"), 0);
  EXPECT_GT(st.reused_tokens_by_scheme.at("icarus+naive"), 0);
}

// Whole-prompt selection over a chunked prompt: the earlier chunks wait at
// the boundary layer and the last one's rows exceed the budget, so they are
// split and resumed; the ICaRus decoder row goes with the resumed last row.
TEST_F(Compose, ChunkedSelectionEqualsTheOneChunkRun) {
  const std::vector<std::vector<int32_t>> docs = {doc(400, 48), doc(401, 56)};
  const std::vector<int32_t> prompt = prompt_of(docs, 410);
  auto one_chunk = make(true, 2048);
  auto chunked = make(true, 32);
  ASSERT_TRUE(one_chunk && chunked);
  for (const Team& t : kTeams) {
    const std::string composed = std::string(t.exact) + "+sparsex";
    std::vector<Outcome> out;
    for (ServingEngine* e : {one_chunk.get(), chunked.get()}) {
      cache_docs(*e, docs, composed);
      out.push_back(ask(*e, prompt, t.adapter, composed, {}, composed));
    }
    EXPECT_GE(out[0].reused, 64) << composed;
    EXPECT_EQ(out[1].reused, out[0].reused) << composed;
    expect_same(out[1], out[0], composed + " chunked vs one chunk");
    EXPECT_LE(chunked->stats().max_step_token_layers, int64_t{32} * kLayers + kLayers) << composed;
  }
}

TEST_F(Compose, PairsThatDoNotComposeAreInvalidArguments) {
  auto eng = make(true);
  ASSERT_TRUE(eng);
  auto code = [&](const std::string& scheme) {
    ServeRequest r = greedy_request(cat({doc(500, 10), invocation_}), 1);
    r.adapter = "alora";
    r.kv_sharing = scheme;
    auto id = eng->submit(std::move(r), [](ServeEvent&&) {});
    if (id.is_ok()) eng->cancel(*id);
    return id.is_ok() ? ErrorCode::kOk : id.status().code();
  };
  EXPECT_EQ(code("alora+sparsex"), ErrorCode::kOk);
  EXPECT_EQ(code("sparsex+alora"), ErrorCode::kOk);
  EXPECT_EQ(code("sparsex+cacheblend"), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code("lragent-base+icarus"), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code("full+sparsex"), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code("alora+"), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code("alora+sparsex+naive"), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace agentkv
