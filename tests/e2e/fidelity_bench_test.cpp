// bench-fidelity's workflow tasks on the real model (src/bench/fidelity.cpp):
// the chat history's sessions and the agents' generated reports are found
// in the cache and reused (by relay too, from the captures its cache
// requests asked for), and a scheme at its exact limit (cacheblend at ratio
// 1.0) gives full recomputation's distributions through the bench.
// Skipped when the model file is absent (failed under CI).
#include <gtest/gtest.h>

#include <filesystem>

#include "bench/fidelity.h"
#include "bench/scheme_spec.h"
#include "ci_required.h"
#include "serving_util.h"

namespace agentkv {
namespace {

using namespace agentkv::testing;

TEST(FidelityBench, WorkflowTasksReuseTheirCachedDocumentsAndMeetTheExactLimit) {
  AGENTKV_REQUIRE(!std::filesystem::exists(model_path()), "model not found: " << model_path());
  for (const std::string kind : {"chat", "agents"}) {
    SCOPED_TRACE(kind);
    FidelityOptions o;
    o.model_path = model_path();
    o.n_threads = 2;
    o.gen_tokens = 4;
    auto shape = fidelity_task_defaults(kind);
    ASSERT_TRUE(shape.is_ok());
    o.tasks = *shape;
    o.tasks.n_prompts = 1;
    o.tasks.agent_tokens = 48;
    o.relay_profile = agentkv::test::source_dir() + "/profiles/smollm2-135m-instruct-q4_1.relay.json";
    for (const char* spec : {"naive", "cacheblend:1.0", "relay"}) {
      auto s = parse_scheme_spec(spec);
      ASSERT_TRUE(s.is_ok());
      o.schemes.push_back(*s);
    }
    auto rep = run_fidelity(o);
    ASSERT_TRUE(rep.is_ok()) << rep.status().message();
    ASSERT_EQ(rep->rows.size(), 3u);
    // naive: the cached documents were found (for agents, the reports'
    // decode-phase K/V) and most K/V entries were not computed.
    EXPECT_GT(rep->rows[0].reused_tokens, kind == "chat" ? 600 : 64);
    EXPECT_GT(rep->rows[0].reuse, 0.4);
    // cacheblend at ratio 1.0 recomputes every reused row from layer 1 on:
    // the same tokens and distributions as full recomputation (the engine
    // test Reuse.ExactLimitsEqualFullRecomputation finds it bitwise).
    EXPECT_GT(rep->rows[1].reused_tokens, 0);
    EXPECT_EQ(rep->rows[1].mean_kl, 0.0);
    EXPECT_EQ(rep->rows[1].top1, 1.0);
    EXPECT_EQ(rep->rows[1].exact, 1.0);
    // relay finds the same documents and, with its profile (layers 1, 8,
    // 30), recomputes every reused row in layers 1-8 at least, so it reuses
    // at most 22/30 of what naive does (23/30: a margin for rounding).
    EXPECT_EQ(rep->rows[2].reused_tokens, rep->rows[0].reused_tokens);
    EXPECT_GT(rep->rows[2].reuse, 0.0);
    EXPECT_LT(rep->rows[2].reuse, rep->rows[0].reuse * 23 / 30);
  }
}

}  // namespace
}  // namespace agentkv
