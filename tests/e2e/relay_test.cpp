// RelayCaching (`relay`) on the real model, through the serving engine: an
// upstream request's generated tokens, with the hidden states and influence
// captured while it decoded, are reused in a downstream prompt; reused tokens
// resume at l_start from their snapshots; the exact limit is full prefill bit
// for bit; layer 0's K rotated to new positions equals K computed there; a
// chain reuses an output decoded over reused K/V; bad parameters and
// profiles are clear errors; evicted upstream KV is recomputed. Skipped when
// the model file is absent (failed under CI).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "../ci_required.h"
#include "agentkv/serving.h"
#include "serving_util.h"
#include "runtime/request_hooks.h"

namespace agentkv {
namespace {

using namespace agentkv::testing;

constexpr int32_t kBs = 16;
constexpr int32_t kLayers = 30;  // SmolLM2-135M (the exact-limit tests take the model's)

class Relay : public ::testing::Test {
 protected:
  void SetUp() override {
    AGENTKV_REQUIRE(!std::filesystem::exists(model_path()), "model not found: " << model_path());
  }
  static ServingOptions options(bool prefix_caching = true, int64_t kv_mb = 64) {
    ServingOptions o;
    o.model_path = model_path();
    o.n_threads = 2;
    o.block_size = kBs;
    o.kv_cache_mb = kv_mb;
    o.max_batch_tokens = 2048;
    o.prefix_caching = prefix_caching;
    return o;
  }
  static std::unique_ptr<ServingEngine> make(const ServingOptions& o) {
    auto e = create_serving_engine(o);
    EXPECT_TRUE(e.is_ok()) << e.status().message();
    return e.is_ok() ? std::move(e).value() : nullptr;
  }
  static KvSharingParams layers(int32_t s, int32_t d, int32_t e) {
    KvSharingParams p;
    p.l_start = s;
    p.l_det = d;
    p.l_end = e;
    return p;
  }
  static ServeRequest relay(std::vector<int32_t> prompt, int max_tokens, KvSharingParams p) {
    ServeRequest r = greedy_request(std::move(prompt), max_tokens);
    r.kv_sharing = "relay";
    r.kv_sharing_params = p;
    return r;
  }
  static Outcome one(ServingEngine& e, ServeRequest r) {
    std::vector<ServeRequest> v;
    v.push_back(std::move(r));
    return serve_requests(e, std::move(v))[0];
  }
};

// l_start 0, l_end = L and both thresholds 0 recompute every reused token in
// every layer: full prefill, bit for bit, on 8 upstream/downstream pairs.
TEST_F(Relay, ExactLimitEqualsFullPrefill) {
  auto ref = make(options(/*prefix_caching=*/false));
  auto eng = make(options());
  ASSERT_TRUE(ref && eng);
  KvSharingParams all = layers(0, 0, eng->n_layers());  // the model's (SmolLM2: 30, Gemma 3 270M: 18)
  all.dev_threshold = 0;
  all.influence_threshold = 0;
  int64_t reused = 0;
  for (uint32_t i = 0; i < 8; ++i) {
    const Outcome up = one(*eng, relay(doc(300 + i, 40 + 8 * i), 56, all));
    ASSERT_EQ(up.tokens.size(), 56u);
    const auto prompt = cat({doc(400 + i, 5 + i), up.tokens, doc(500 + i, 9)});
    const Outcome r = one(*ref, greedy_request(prompt, 4));
    const Outcome o = one(*eng, relay(prompt, 4, all));
    expect_same(o, r, "relay exact limit, pair " + std::to_string(i));
    reused += o.reused;
  }
  EXPECT_GT(reused, 8 * 32);
}

// Layer 0's K depends on the token and its position only: the upstream's
// decode-phase K rotated to its new position equals K computed there, to
// RoPE rounding. Above it the context differs (another prefix), so only
// layer 0 is compared; the relay layers below l_start = 1 are just that.
TEST_F(Relay, RotatedLayerZeroKeysEqualKeysComputedInPlace) {
  // f32 KV: the probe sets fresh f32 K/V beside the cached ones, and an
  // f16 cache would add its own rounding (3.4e-3 in K) to RoPE's.
  ServingOptions so = options();
  so.kv_dtype = "f32";
  auto eng = make(so);
  ASSERT_TRUE(eng);
  KvSharingParams all = layers(0, 0, eng->n_layers());  // the model's (SmolLM2: 30, Gemma 3 270M: 18)
  all.dev_threshold = 0;
  const Outcome up = one(*eng, relay(doc(600, 37), 64, all));
  ASSERT_EQ(up.tokens.size(), 64u);
  float worst = 0, worst_v = 0, scale = 0;
  int64_t n = 0;
  ServeRequest r = relay(cat({doc(601, 101), up.tokens, doc(602, 5)}), 1, all);
  edit_request_hooks(r).kv_probe = [&](const ServeRequestHooks::KvProbe& p) {
    if (p.layer != 0) return;
    for (int64_t i = 0; i < p.n * p.kv_dim; ++i) {
      worst = std::max(worst, std::abs(p.k[i] - p.cached_k[i]));
      scale = std::max(scale, std::abs(p.k[i]));
      worst_v = std::max(worst_v, std::abs(p.v[i] - p.cached_v[i]));
    }
    n += p.n;
  };
  const Outcome o = one(*eng, std::move(r));
  ASSERT_TRUE(o.error.empty()) << o.error;
  EXPECT_GE(n, 48);
  EXPECT_EQ(worst_v, 0.0f);  // V has no position: the same bits
  // Rotating by the delta rounds differently from rotating by the position
  // at once, by about an ulp of the largest key: measured 2026-12-08 worst
  // / max |K| = 1.27e-7 on Gemma 3 270M (9.5e-7 of 7.5), 1.56e-7 on SmolLM2
  // (9.5e-7 of 6.1), 2.1e-7 on Qwen2.5-Coder-0.5B (3.05e-5 of 145, its K
  // biases). The bound is 16 float epsilons of max |K| (1.9e-6), 9x the worst.
  std::printf("[ rotated K ] worst %.3g, max |K| %.3g, relative %.3g\n", worst, scale, worst / scale);
  EXPECT_LT(worst, 16 * std::numeric_limits<float>::epsilon() * scale);
  EXPECT_GT(worst, 0.0f);  // the test compares rotated keys, not copies
}

// With snapshots, reused tokens resume at l_start: the prefill computes the
// new tokens in every layer, every reused token in [l_start, l_det] and the
// selected ones up to l_end. Without captures (--relay-capture off) they
// start at layer 0.
TEST_F(Relay, ReusedTokensResumeFromTheirSnapshots) {
  for (const char* capture : {"on-request", "off"}) {
    ServingOptions so = options();
    so.relay_capture = capture;
    so.kv_sharing_params = layers(2, 4, 20);
    auto eng = make(so);
    ASSERT_TRUE(eng);
    const Outcome up = one(*eng, relay(doc(700, 30), 96, {}));
    ASSERT_EQ(up.tokens.size(), 96u);
    const auto prompt = cat({doc(701, 20), up.tokens, doc(702, 12)});
    const Outcome o = one(*eng, relay(prompt, 4, {}));
    ASSERT_TRUE(o.error.empty()) << o.error;
    const int64_t n = static_cast<int64_t>(prompt.size()), r = o.reused;
    EXPECT_GE(r, 64) << capture;
    const int64_t start = std::string(capture) == "off" ? 0 : 2;
    const int64_t dense = (n - r) * kLayers + r * (4 - start + 1);
    EXPECT_GE(o.prefill_token_layers, dense) << capture;
    EXPECT_LE(o.prefill_token_layers, dense + r * (20 - 4 - 1)) << capture;
    // Something was selected (the suffix at least), not everything, and each
    // selected token adds exactly the layers (l_det, l_end): the rows
    // started where they should (from layer 0 the remainder would be 2r).
    EXPECT_GE(o.prefill_token_layers, dense + 10 * (20 - 4 - 1)) << capture;
    EXPECT_LT(o.prefill_token_layers, dense + r * (20 - 4 - 1)) << capture;
    EXPECT_EQ((o.prefill_token_layers - dense) % (20 - 4 - 1), 0) << capture;
  }
}

// The influence score is captured while a relay request decodes: with
// deviation and suffix off, only influence selects, and it does; after an
// upstream that captured nothing (kv_sharing none), nothing is selected.
TEST_F(Relay, InfluenceIsCapturedWhileDecoding) {
  ServingOptions so = options();
  so.kv_sharing_params = layers(2, 4, 20);
  auto eng = make(so);
  ASSERT_TRUE(eng);
  KvSharingParams only_influence;
  only_influence.dev_threshold = 1e6;
  only_influence.suffix_tokens = 0;
  for (const bool captured : {true, false}) {
    const auto head = doc(captured ? 710 : 720, 30);
    ServeRequest u = relay(head, 96, {});
    if (!captured) u.kv_sharing = "none";
    const Outcome up = one(*eng, std::move(u));
    ASSERT_EQ(up.tokens.size(), 96u);
    const auto prompt = cat({doc(captured ? 711 : 721, 20), up.tokens, doc(712, 12)});
    const Outcome o = one(*eng, relay(prompt, 2, only_influence));
    const int64_t n = static_cast<int64_t>(prompt.size()), r = o.reused;
    ASSERT_GE(r, 64);
    const int64_t start = captured ? 2 : 0;  // no snapshots after none either
    const int64_t dense = (n - r) * kLayers + r * (4 - start + 1);
    const int64_t selected = (o.prefill_token_layers - dense) / (20 - 4 - 1);
    if (captured) {
      EXPECT_GT(selected, 0);
      EXPECT_LT(selected, r / 2);
    } else {
      EXPECT_EQ(o.prefill_token_layers, dense);
    }
  }
}

// Agent 3 reuses agent 2's output, which agent 2 decoded over K/V it reused
// from agent 1 (approximate blocks): found, and resumed from snapshots.
TEST_F(Relay, AChainReusesOutputsDecodedOverReusedKv) {
  ServingOptions so = options();
  so.kv_sharing_params = layers(1, 3, 12);
  auto eng = make(so);
  ASSERT_TRUE(eng);
  const auto q = doc(800, 48);
  const Outcome a1 = one(*eng, relay(cat({doc(801, 16), q}), 64, {}));
  const Outcome a2 = one(*eng, relay(cat({doc(802, 16), q, a1.tokens, doc(803, 4)}), 64, {}));
  ASSERT_EQ(a2.tokens.size(), 64u);
  EXPECT_GE(a2.reused, 48 + 32);
  const Outcome a3 = one(*eng, relay(cat({doc(804, 16), q, a1.tokens, a2.tokens, doc(805, 4)}), 4, {}));
  ASSERT_TRUE(a3.error.empty()) << a3.error;
  EXPECT_GE(a3.reused, a2.reused + 48);  // agent 2's output too, from its approximate blocks
  // A request under none never sees the approximate blocks.
  const Outcome plain = one(*eng, greedy_request(cat({doc(802, 16), q, a1.tokens, doc(803, 4)}), 1));
  EXPECT_EQ(plain.reused, 0);
  EXPECT_LE(plain.cached, 16 + 48);
}

TEST_F(Relay, BadParametersAreInvalidArguments) {
  auto eng = make(options());
  ASSERT_TRUE(eng);
  auto submit = [&](KvSharingParams p) {
    auto id = eng->submit(relay(doc(900, 10), 1, p), [](ServeEvent&&) {});
    if (id.is_ok()) eng->cancel(*id);
    return id.is_ok() ? ErrorCode::kOk : id.status().code();
  };
  EXPECT_EQ(submit({}), ErrorCode::kInvalidArgument);              // no layers, no profile
  EXPECT_EQ(submit(layers(1, 3, 31)), ErrorCode::kInvalidArgument);  // past the 30 layers
  EXPECT_EQ(submit(layers(3, 1, 12)), ErrorCode::kInvalidArgument);  // l_det < l_start
  EXPECT_EQ(submit(layers(1, 12, 12)), ErrorCode::kInvalidArgument); // l_det >= l_end
  EXPECT_EQ(submit(layers(-1, 3, 12)), ErrorCode::kInvalidArgument);
  KvSharingParams p = layers(1, 3, 12);
  p.dev_threshold = -1;
  EXPECT_EQ(submit(p), ErrorCode::kInvalidArgument);
  p = layers(1, 3, 12);
  p.influence_threshold = -0.5;
  EXPECT_EQ(submit(p), ErrorCode::kInvalidArgument);
  p = layers(1, 3, 12);
  p.suffix_tokens = -2;
  EXPECT_EQ(submit(p), ErrorCode::kInvalidArgument);
  p = layers(1, 3, 12);
  p.ratio = 0.2;
  EXPECT_EQ(submit(p), ErrorCode::kInvalidArgument);  // a cacheblend parameter
  EXPECT_EQ(submit(layers(1, 3, 12)), ErrorCode::kOk);
  EXPECT_EQ(submit(layers(5, 0, 5)), ErrorCode::kOk);  // an empty band: direct reuse
  // The engine goes on serving.
  EXPECT_TRUE(one(*eng, greedy_request(doc(901, 10), 2)).error.empty());
}

// The committed profile is SmolLM2's: it loads, its layers become the
// defaults (a relay request needs none of its own), and the captures run at
// its l_start.
TEST_F(Relay, TheCommittedProfileServesTheDefaultModel) {
  ServingOptions o = options();
  o.relay_profile = agentkv::test::source_dir() + "/profiles/smollm2-135m-instruct-q4_1.relay.json";
  auto eng = make(o);
  ASSERT_TRUE(eng);
  const Outcome up = one(*eng, relay(doc(960, 30), 80, {}));
  ASSERT_TRUE(up.error.empty()) << up.error;
  const auto prompt = cat({doc(961, 20), up.tokens, doc(962, 8)});
  const Outcome o2 = one(*eng, relay(prompt, 2, {}));
  ASSERT_TRUE(o2.error.empty()) << o2.error;
  EXPECT_GE(o2.reused, 48);
  // Band [1, 30), l_det 8: every reused token computes layers 1..8 at least.
  const int64_t n = static_cast<int64_t>(prompt.size()), r = o2.reused;
  EXPECT_GE(o2.prefill_token_layers, (n - r) * kLayers + r * 8);
  EXPECT_EQ((o2.prefill_token_layers - (n - r) * kLayers - r * 8) % 21, 0);
}

// The captures' memory counts in the KV budget, and only where it is kept:
// K/V alone with captures off, 8 bytes per token of influence without a
// relay l_start, the hidden state (d_model floats) too with a profile.
TEST_F(Relay, CaptureMemoryIsCountedWhereItIsKept) {
  auto bytes = [&](const char* capture, bool profile, const char* kv_dtype = "f16") {
    ServingOptions o = options();
    o.kv_dtype = kv_dtype;
    o.relay_capture = capture;
    if (profile) o.relay_profile = agentkv::test::source_dir() + "/profiles/smollm2-135m-instruct-q4_1.relay.json";
    auto e = make(o);
    return e ? e->stats().kv_bytes_per_block : 0;
  };
  // SmolLM2: 3 KV heads x 64 in f16, plus DroidSpeak's owner tag (a float
  // and a stamp per token); f32 K/V take twice the bytes.
  const int64_t kv = int64_t{kLayers} * 2 * kBs * 192 * 2 + kBs * 8;
  EXPECT_EQ(bytes("off", true), kv);
  EXPECT_EQ(bytes("off", true, "f32"), 2 * (kv - kBs * 8) + kBs * 8);
  EXPECT_EQ(bytes("off", true, "bf16"), kv);
  EXPECT_EQ(bytes("on-request", false), kv + kBs * 8);
  EXPECT_EQ(bytes("on-request", true), kv + kBs * 8 + kBs * (576 * 4 + 4));
}

TEST_F(Relay, BadProfilesAreClearErrors) {
  const std::string dir = ::testing::TempDir();
  auto start = [&](const std::string& path) {
    ServingOptions o = options();
    o.relay_profile = path;
    auto e = create_serving_engine(o);
    return e.is_ok() ? std::string() : e.status().message();
  };
  EXPECT_NE(start(dir + "/no-such-profile.json").find("cannot read the relay profile"), std::string::npos);
  const std::string corrupt = dir + "/corrupt.json";
  std::ofstream(corrupt) << "{\"format\": \"agentkv-relay-profile\", \"version\": 1, \"model\": [";
  EXPECT_NE(start(corrupt).find("not JSON"), std::string::npos);
  const std::string other = dir + "/other.json";
  std::ofstream(other) << R"({"format": "agentkv-relay-profile", "version": 1,
    "model": {"id": "0123456789abcdef0123456789abcdef", "name": "another", "n_layers": 30},
    "layers": {"l_start": 1, "l_det": 3, "l_end": 20}})";
  EXPECT_NE(start(other).find("is for another model"), std::string::npos) << start(other);
}

// Upstream K/V evicted under memory pressure: nothing reused, the request
// recomputes and succeeds.
TEST_F(Relay, EvictedUpstreamIsRecomputed) {
  ServingOptions so = options();
  so.kv_cache_tokens = 13 * kBs;  // 13 blocks of 16 tokens
  so.kv_sharing_params = layers(1, 3, 12);
  auto eng = make(so);
  ASSERT_TRUE(eng);
  const Outcome up = one(*eng, relay(doc(950, 20), 64, {}));
  ASSERT_EQ(up.tokens.size(), 64u);
  one(*eng, relay(doc(951, 180), 1, {}));  // takes the pool
  const Outcome o = one(*eng, relay(cat({doc(952, 10), up.tokens, doc(953, 4)}), 3, {}));
  EXPECT_TRUE(o.error.empty()) << o.error;
  EXPECT_EQ(o.tokens.size(), 3u);
  EXPECT_EQ(o.reused, 0);
}

}  // namespace
}  // namespace agentkv
