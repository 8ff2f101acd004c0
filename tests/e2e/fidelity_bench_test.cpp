// bench-fidelity's workflow tasks on the real model (src/workloads/fidelity.cpp):
// the chat history's sessions and the agents' generated reports are found
// in the cache and reused (by relay too, from the captures its cache
// requests asked for), and a scheme at its exact limit (cacheblend at ratio
// 1.0) gives full recomputation's distributions through the bench.
// Skipped when the model file is absent (failed under CI).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "ci_required.h"
#include "serving_util.h"
#include "workloads/fidelity.h"
#include "workloads/scheme_spec.h"

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

// --teacher scheme measures each scheme on its own greedy tokens (what the
// server's fidelity audit sees); --teacher full on the reference's. Where
// the two token sequences are the same, so are the runs, bit for bit: the
// same KL either way, for every prompt. The exact limit is 0 either way.
TEST(FidelityBench, EitherTeacherGivesOneKlWhereTheTokensAgree) {
  AGENTKV_REQUIRE(!std::filesystem::exists(model_path()), "model not found: " << model_path());
  FidelityOptions o;
  o.model_path = model_path();
  o.n_threads = 2;
  o.gen_tokens = 2;  // short, so that approximate runs also keep the reference's tokens
  auto shape = fidelity_task_defaults("retrieval");
  ASSERT_TRUE(shape.is_ok());
  o.tasks = *shape;
  o.tasks.n_prompts = 4;
  o.tasks.doc_tokens = 64;
  for (const char* spec : {"naive", "epic:8", "cacheblend:1.0"}) {
    auto s = parse_scheme_spec(spec);
    ASSERT_TRUE(s.is_ok());
    o.schemes.push_back(*s);
  }
  std::map<std::string, std::vector<FidelityRequestLog>> logs;
  std::string teacher;
  o.on_request = [&](const FidelityRequestLog& r) { logs[teacher].push_back(r); };
  std::map<std::string, FidelityReport> reps;
  for (const char* t : {"full", "scheme"}) {
    teacher = o.teacher = t;
    auto rep = run_fidelity(o);
    ASSERT_TRUE(rep.is_ok()) << rep.status().message();
    reps[t] = *rep;
  }
  ASSERT_EQ(logs["full"].size(), 12u);
  ASSERT_EQ(logs["scheme"].size(), 12u);
  int same = 0, differ = 0, approximate_same = 0;
  for (size_t i = 0; i < 12; ++i) {
    const FidelityRequestLog& f = logs["full"][i];
    const FidelityRequestLog& s = logs["scheme"][i];
    SCOPED_TRACE(s.scheme->label + " prompt " + std::to_string(s.prompt_index));
    ASSERT_EQ(f.prompt, s.prompt);
    EXPECT_EQ(f.tokens, s.tokens);  // the greedy run is the same in both modes
    EXPECT_EQ(s.cache_prompts.size(), 4u);
    if (s.tokens == s.reference) {
      EXPECT_EQ(f.kl, s.kl);
      ++same;
      approximate_same += s.kl > 0;
    } else {
      ++differ;
    }
  }
  EXPECT_GE(same, 4);              // cacheblend:1.0's four at least
  EXPECT_GE(approximate_same, 1);  // and a run whose KL is not 0 (else the check is void)
  EXPECT_EQ(reps["scheme"].rows[2].mean_kl, 0.0);
  EXPECT_EQ(reps["scheme"].rows[2].top1, 1.0);
  EXPECT_GT(reps["scheme"].rows[0].mean_kl, 0.0);  // naive is not exact
  std::printf("teacher check: %d runs with the reference's tokens, %d without\n", same, differ);
}

TEST(FidelityBench, AnUnknownTeacherIsAnError) {
  FidelityOptions o;
  o.teacher = "oracle";
  auto rep = run_fidelity(o);
  ASSERT_FALSE(rep.is_ok());
  EXPECT_NE(rep.status().message().find("teacher 'oracle'"), std::string::npos);
}

}  // namespace
}  // namespace agentkv
