// The exact sharing schemes on the real model, through the serving engine
// and real PEFT adapter files (docs/design.md §4): `none` never shares across
// adapters, `alora` shares base-lineage blocks both ways, `icarus` shares all
// KV, and none of them changes what a request computes. Skipped when the
// model file is absent.
#include <gtest/gtest.h>

#include "../ci_required.h"

#include <cmath>
#include <filesystem>
#include <unistd.h>
#include <string>
#include <vector>

#include "adapter/synth_adapter.h"
#include "agentkv/serving.h"
#include "runtime/loaded_model.h"
#include "serving_util.h"
#include "tokenizer/tokenizer.h"

namespace agentkv {
namespace {

using namespace agentkv::testing;

constexpr int32_t kBs = 16;

class SharingExact : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(model_path())) return;
    auto lm = load_model_file(model_path(), 2);
    ASSERT_TRUE(lm.is_ok()) << lm.status().message();
    dir_ = std::filesystem::temp_directory_path() / ("agentkv_sharing_" + std::to_string(::getpid()));
    invocation_ = lm->tokenizer->encode("<|im_start|>assistant\nVerdict:", false, true);
    ASSERT_FALSE(invocation_.empty());
    write_synth_adapters(*lm->model, dir_.string(),
                         {{"lora_x", 11},
                          {"lora_y", 12},
                          {"alora", 13},
                          {"icarus_1", 21},
                          {"icarus_2", 22},
                          {"icarus_3", 23},
                          {"icarus_4", 24}},
                         invocation_);
    tokenizer_ = std::move(lm->tokenizer);
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
    tokenizer_.reset();
  }
  void SetUp() override {
    AGENTKV_REQUIRE(!std::filesystem::exists(model_path()), "model not found: " << model_path());
  }

  std::unique_ptr<ServingEngine> make(bool prefix_caching, const std::string& scheme = "none", int64_t kv_mb = 64) {
    ServingOptions o;
    o.model_path = model_path();
    o.n_threads = 2;
    o.kv_cache_mb = kv_mb;
    o.block_size = kBs;
    o.max_batch_tokens = 256;
    o.prefix_caching = prefix_caching;
    o.kv_sharing = scheme;
    for (const char* n : {"lora_x", "lora_y", "alora"}) o.adapters.push_back({n, (dir_ / n).string(), ""});
    for (const char* n : {"icarus_1", "icarus_2", "icarus_3", "icarus_4"})
      o.adapters.push_back({n, (dir_ / n).string(), "icarus"});
    auto e = create_serving_engine(o);
    EXPECT_TRUE(e.is_ok()) << e.status().message();
    return e.is_ok() ? std::move(e).value() : nullptr;
  }

  static std::vector<int32_t> encode(const std::string& text) { return tokenizer_->encode(text, false, true); }

  // One request, alone, as `adapter` under `scheme`.
  static Outcome ask(ServingEngine& eng, std::vector<int32_t> prompt, const std::string& adapter,
                     const std::string& scheme = "", int max_tokens = 8) {
    ServeRequest r = greedy_request(std::move(prompt), max_tokens);
    r.adapter = adapter;
    r.kv_sharing = scheme;
    auto out = serve_requests(eng, {std::move(r)});
    EXPECT_EQ(out[0].error, "");
    return out[0];
  }

  static std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  static inline std::filesystem::path dir_;
  static inline std::vector<int32_t> invocation_;
  static inline std::unique_ptr<Tokenizer> tokenizer_;
};

const char* kContext =
    "<|im_start|>system\nYou are a planning agent in a team of agents. Read the task, list the steps you would "
    "take, and keep every step short and concrete.<|im_end|>\n<|im_start|>user\nWe need to move a small web "
    "service from one cloud region to another without downtime. The service has a database, a cache and two "
    "stateless API servers behind a load balancer.<|im_end|>\n<|im_start|>assistant\n";

TEST_F(SharingExact, NoneKeepsEachAdapterToItsOwnCache) {
  auto eng = make(true);
  auto ref = make(false);
  const std::vector<int32_t> p = encode(kContext);
  ASSERT_GT(p.size(), size_t{4 * kBs});
  const Outcome x1 = ask(*eng, p, "lora_x");
  const Outcome y = ask(*eng, p, "lora_y");
  const Outcome base = ask(*eng, p, "");
  const Outcome x2 = ask(*eng, p, "lora_x");
  EXPECT_EQ(x1.cached, 0);
  EXPECT_EQ(y.cached, 0) << "lora_y was served lora_x's KV";
  EXPECT_EQ(base.cached, 0) << "the base was served an adapter's KV";
  EXPECT_EQ(x2.cached, int32_t(p.size() - 1) / kBs * kBs) << "an adapter hits its own blocks";
  expect_same(x2, x1, "lora_x hit vs miss");
  expect_same(x1, ask(*ref, p, "lora_x"), "lora_x vs no cache");
  expect_same(y, ask(*ref, p, "lora_y"), "lora_y vs no cache");
  // The adapters really change the model.
  EXPECT_TRUE(x1.tokens != base.tokens || std::fabs(x1.logprobs[0] - base.logprobs[0]) > 1e-3);
  EXPECT_TRUE(x1.tokens != y.tokens || std::fabs(x1.logprobs[0] - y.logprobs[0]) > 1e-3);
}

// Paper 004's pipeline in miniature: base -> aLoRA -> base on one context.
TEST_F(SharingExact, AloraSharesBaseBlocksBothWaysAndStaysExact) {
  const std::vector<int32_t> ctx = encode(kContext);
  auto run = [&](ServingEngine& eng, const std::string& scheme, std::vector<Outcome>* turns) {
    const Outcome t1 = ask(eng, ctx, "", scheme, 16);
    const std::vector<int32_t> before_inv = concat(ctx, t1.tokens);
    const Outcome t2 = ask(eng, concat(before_inv, invocation_), "alora", scheme, 8);
    std::vector<int32_t> t3_prompt = concat(concat(concat(before_inv, invocation_), t2.tokens),
                                            encode("<|im_end|>\n<|im_start|>user\nGo on.<|im_end|>\n"));
    const Outcome t3 = ask(eng, t3_prompt, "", scheme, 8);
    *turns = {t1, t2, t3};
    return static_cast<int32_t>(before_inv.size());
  };
  std::vector<Outcome> shared, plain, uncached;
  auto e1 = make(true, "alora");
  const int32_t inv_at = run(*e1, "", &shared);  // the server default: alora
  auto e2 = make(true, "none");
  run(*e2, "", &plain);
  auto e3 = make(false, "none");
  run(*e3, "", &uncached);
  // Every full block turn 1 computed before the invocation: its prompt and
  // all but its last sampled token, which is never fed (inv_at - 1 tokens;
  // on Qwen2.5 inv_at falls on a block edge, where inv_at / kBs counted one
  // block too many).
  const int32_t before = (inv_at - 1) / kBs * kBs;
  EXPECT_EQ(shared[1].cached, before) << "the adapter's prefill reuses the base's blocks";
  EXPECT_EQ(plain[1].cached, 0) << "under none the adapter recomputes everything";
  EXPECT_GE(shared[2].cached, before);
  for (int t = 0; t < 3; ++t) {
    expect_same(shared[t], uncached[t], "alora turn " + std::to_string(t + 1) + " vs no cache");
    expect_same(plain[t], uncached[t], "none turn " + std::to_string(t + 1) + " vs no cache");
  }
}

// The other way: blocks the adapter computed before its activation are the
// base's, so the base's next turn hits them with no base turn before.
TEST_F(SharingExact, BaseHitsBlocksTheAloraComputedBeforeActivation) {
  auto eng = make(true, "alora");
  const std::vector<int32_t> ctx = encode(kContext);
  const Outcome a = ask(*eng, concat(ctx, invocation_), "alora");
  EXPECT_EQ(a.cached, 0);
  const Outcome b = ask(*eng, concat(ctx, encode("Step 1:")), "");
  EXPECT_EQ(b.cached, int32_t(ctx.size()) / kBs * kBs);
  // A request may also pick the scheme: under none the adapter's blocks are its own.
  auto eng2 = make(true, "alora");
  ask(*eng2, concat(ctx, invocation_), "alora", "none");
  EXPECT_EQ(ask(*eng2, concat(ctx, encode("Step 1:")), "").cached, 0);
}

TEST_F(SharingExact, AloraPromptWithoutInvocationIsRefused) {
  auto eng = make(true, "alora");
  ServeRequest r = greedy_request(encode(kContext), 4);
  r.adapter = "alora";
  auto id = eng->submit(std::move(r), [](ServeEvent&&) {});
  ASSERT_FALSE(id.is_ok());
  EXPECT_EQ(id.status().code(), ErrorCode::kInvalidArgument);
}

TEST_F(SharingExact, IcarusEqualsItsOwnEncodingPassAndSharesWithTheBase) {
  const std::vector<int32_t> p = encode(kContext);
  auto shared = make(true, "icarus");
  auto uncached = make(false, "none");
  const Outcome base = ask(*shared, p, "", "", 12);
  const Outcome i1 = ask(*shared, p, "icarus_1", "", 12);
  const Outcome i2 = ask(*shared, p, "icarus_2", "", 12);
  EXPECT_EQ(i1.cached, int32_t(p.size() - 1) / kBs * kBs) << "the decoder reads the base's KV";
  EXPECT_EQ(i2.cached, int32_t(p.size() - 1) / kBs * kBs);
  // The reference: no sharing at all, each adapter runs its own encoder pass.
  const Outcome r1 = ask(*uncached, p, "icarus_1", "", 12);
  expect_same(i1, r1, "icarus_1 shared vs own encoding");
  expect_same(i2, ask(*uncached, p, "icarus_2", "", 12), "icarus_2 shared vs own encoding");
  // Under none with the cache on, an icarus adapter shares with nobody.
  auto none = make(true, "none");
  ask(*none, p, "", "", 4);
  const Outcome n1 = ask(*none, p, "icarus_1", "", 12);
  EXPECT_EQ(n1.cached, 0);
  expect_same(n1, r1, "icarus_1 under none");
  // The decoder matters: its output differs from the base's.
  EXPECT_TRUE(i1.tokens != base.tokens || std::fabs(i1.logprobs[0] - base.logprobs[0]) > 1e-3);
}

// Four ICaRus agents take turns on one growing trajectory. Under icarus each
// turn computes only the new tokens and the context is stored once; under
// none every agent computes and stores its own copy.
TEST_F(SharingExact, IcarusRoundRobinComputesAndStoresAQuarter) {
  struct Totals {
    int64_t computed = 0;
    int32_t blocks = 0;
  };
  auto trajectory = [&](const std::string& scheme, std::vector<Outcome>* turns) {
    auto eng = make(true, scheme, 160);  // room for none's four copies: nothing is evicted
    std::vector<int32_t> ctx = encode(kContext);
    Totals t;
    for (int turn = 0; turn < 12; ++turn) {
      const std::string agent = "icarus_" + std::to_string(turn % 4 + 1);
      Outcome o = ask(*eng, ctx, agent, "", 8);
      t.computed += int64_t(ctx.size()) - o.cached;
      ctx = concat(concat(ctx, o.tokens), encode("\nNext agent:"));
      turns->push_back(std::move(o));
    }
    const ServingStats s = eng->stats();
    t.blocks = s.kv_blocks_used + s.kv_blocks_cached;
    return t;
  };
  std::vector<Outcome> ti, tn;
  const Totals icarus = trajectory("icarus", &ti);
  const Totals none = trajectory("none", &tn);
  for (size_t i = 0; i < ti.size(); ++i) expect_same(ti[i], tn[i], "turn " + std::to_string(i));
  std::printf("[ round robin ] prefill tokens computed: icarus %lld, none %lld (%.2f); KV blocks: icarus %d, none %d (%.2f)\n",
              static_cast<long long>(icarus.computed), static_cast<long long>(none.computed),
              double(icarus.computed) / double(none.computed), icarus.blocks, none.blocks,
              double(icarus.blocks) / double(none.blocks));
  EXPECT_LT(double(icarus.computed) / double(none.computed), 0.4);
  EXPECT_LT(double(icarus.blocks) / double(none.blocks), 0.4);
}

}  // namespace
}  // namespace agentkv
