// The scheduler on the CPU with no model: the runner is elided (a step only
// advances n_computed), so these tests check the plan itself: token budgets,
// chunked prefill, decode, prefix hits, namespaces, preemption and aborts.
#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <memory>
#include <numeric>
#include <random>

namespace agentkv {
namespace {

constexpr int32_t kBs = 4;

// The scheduler does not own its requests; the tests' live until the program ends.
SchedRequest* make_req(RequestId id, std::vector<int32_t> tokens, ExtraKeys keys = {}) {
  static std::deque<std::unique_ptr<SchedRequest>> owned;
  SchedRequest* r = owned.emplace_back(std::make_unique<SchedRequest>()).get();
  r->id = id;
  r->n_prompt = static_cast<int32_t>(tokens.size());
  r->tokens = std::move(tokens);
  r->cache.keys = std::move(keys);
  return r;
}

std::vector<int32_t> iota_tokens(int32_t n, int32_t first = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Runs one step with the runner elided; sampled requests get token 7.
SchedulerOutput step(Scheduler& s) {
  SchedulerOutput out = s.schedule();
  s.on_step_done(out);
  for (const auto& q : out.seqs) {
    if (q.sample) s.append_token(q.req->id, 7);
  }
  return out;
}

TEST(Scheduler, ChunkedPrefillThenDecode) {
  KvManager kv(64, kBs);
  Scheduler s(&kv, {/*max_batch_tokens=*/32, /*max_running=*/8, true});
  s.add(make_req(1, iota_tokens(70)));
  std::vector<int32_t> chunks;
  for (int i = 0; i < 3; ++i) {
    SchedulerOutput out = step(s);
    ASSERT_EQ(out.seqs.size(), 1u);
    chunks.push_back(out.seqs[0].n);
    EXPECT_EQ(out.seqs[0].sample, i == 2);
  }
  EXPECT_EQ(chunks, (std::vector<int32_t>{32, 32, 6}));
  SchedulerOutput out = step(s);  // decode the sampled token
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].begin, 70);
  EXPECT_EQ(out.seqs[0].n, 1);
  EXPECT_TRUE(out.seqs[0].sample);
  EXPECT_EQ(kv.num_slots(1), 71);
}

// Work beyond tokens (a whole-prompt selection's rows, set by the engine):
// the chunk that completes the prompt spends prompt_end_work of the budget
// besides its tokens, and pending_work runs as shares with no tokens, none
// sampled, within the budget, before the request's next token.
TEST(Scheduler, WorkBeyondTokensIsBudgetedAndRunsBeforeTheNextToken) {
  KvManager kv(64, kBs);
  Scheduler s(&kv, {/*max_batch_tokens=*/32, /*max_running=*/8, true});
  s.add(make_req(1, iota_tokens(40)));
  SchedulerOutput out = step(s);
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].n, 32);
  EXPECT_EQ(out.seqs[0].work, 0);
  SchedRequest* r = s.find(1);
  r->prompt_end_work = 20;
  s.add(make_req(2, iota_tokens(30, 500)));
  out = s.schedule();  // request 1's last 8 tokens carry 20 rows of work: 4 tokens are left for request 2
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(out.seqs[0].n, 8);
  EXPECT_EQ(out.seqs[0].work, 20);
  EXPECT_TRUE(out.seqs[0].sample);
  EXPECT_EQ(out.seqs[1].n, 4);
  EXPECT_EQ(out.n_work(), 32);
  s.on_step_done(out);
  // The engine held the first token back: 50 rows of work wait.
  r->pending_work = 50;
  out = s.schedule();
  ASSERT_EQ(out.seqs.size(), 1u);  // request 2 gets no budget left
  EXPECT_EQ(out.seqs[0].req->id, 1u);
  EXPECT_EQ(out.seqs[0].n, 0);
  EXPECT_EQ(out.seqs[0].begin, 40);
  EXPECT_EQ(out.seqs[0].work, 32);
  EXPECT_FALSE(out.seqs[0].sample);
  s.on_step_done(out);
  EXPECT_EQ(r->n_computed, 40);
  r->pending_work = 18;
  out = s.schedule();
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(out.seqs[0].work, 18);
  EXPECT_EQ(out.seqs[1].n, 14);
  s.on_step_done(out);
  r->pending_work = 0;
  s.append_token(1, 7);  // the engine sampled it from the last share
  out = s.schedule();
  EXPECT_EQ(out.seqs[0].req->id, 1u);
  EXPECT_EQ(out.seqs[0].begin, 40);
  EXPECT_EQ(out.seqs[0].n, 1);
  EXPECT_EQ(out.seqs[0].work, 0);  // prompt_end_work counts for the prompt's last chunk only
}

// A preempted request recomputes from its first token: work the engine had
// set goes with its blocks.
TEST(Scheduler, PreemptionDropsPendingWork) {
  KvManager kv(6, kBs);  // 24 slots
  Scheduler s(&kv, {/*max_batch_tokens=*/64, /*max_running=*/8, true});
  s.add(make_req(1, iota_tokens(10)));
  s.add(make_req(2, iota_tokens(10, 300)));
  step(s);
  SchedRequest* r2 = s.find(2);
  r2->pending_work = 5;
  r2->prompt_end_work = 3;
  // Request 1 grows until request 2, the latest admitted, is preempted.
  for (int i = 0; i < 8 && s.n_waiting() == 0; ++i) step(s);
  ASSERT_EQ(s.n_waiting(), 1);
  EXPECT_EQ(r2->pending_work, 0);
  EXPECT_EQ(r2->prompt_end_work, 0);
  EXPECT_EQ(r2->n_computed, 0);
}

TEST(Scheduler, OnePerStepFromCutsThePromptThereThenFeedsOneTokenPerStep) {
  KvManager kv(64, kBs);
  Scheduler s(&kv, {/*max_batch_tokens=*/32, /*max_running=*/8, true});
  auto r = make_req(1, iota_tokens(45));
  r->one_per_step_from = 40;
  s.add(r);
  std::vector<int32_t> chunks;
  for (int i = 0; i < 7; ++i) {
    SchedulerOutput out = step(s);
    ASSERT_EQ(out.seqs.size(), 1u);
    chunks.push_back(out.seqs[0].n);
    EXPECT_EQ(out.seqs[0].sample, i == 6);
  }
  // The budget cuts first (32), then the chunk stops at token 40; the last
  // five prompt tokens run alone, like decode rows.
  EXPECT_EQ(chunks, (std::vector<int32_t>{32, 8, 1, 1, 1, 1, 1}));
  SchedulerOutput out = step(s);  // and the sampled token as usual
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].begin, 45);
  EXPECT_EQ(out.seqs[0].n, 1);
}

TEST(Scheduler, RunningFirstThenWaitingWithinBudget) {
  KvManager kv(64, kBs);
  Scheduler s(&kv, {16, 8, true});
  s.add(make_req(1, iota_tokens(10, 0)));
  step(s);  // 1 is prefilled and sampled
  s.add(make_req(2, iota_tokens(30, 500)));
  SchedulerOutput out = step(s);
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(out.seqs[0].req->id, 1u);  // decode first
  EXPECT_EQ(out.seqs[0].n, 1);
  EXPECT_EQ(out.seqs[1].req->id, 2u);  // then the new prompt, cut to the budget
  EXPECT_EQ(out.seqs[1].n, 15);
  EXPECT_FALSE(out.seqs[1].sample);
  EXPECT_EQ(out.n_tokens(), 16);
}

TEST(Scheduler, MaxRunningBoundsTheBatch) {
  KvManager kv(64, kBs);
  Scheduler s(&kv, {512, 2, true});
  for (RequestId id = 1; id <= 3; ++id) s.add(make_req(id, iota_tokens(5, int32_t(id) * 100)));
  SchedulerOutput out = step(s);
  EXPECT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(s.n_waiting(), 1);
  s.finish(1);
  out = step(s);
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(out.seqs[1].req->id, 3u);
}

TEST(Scheduler, PrefixHitAtAdmissionAndNamespaces) {
  KvManager kv(64, kBs);
  Scheduler s(&kv, {512, 8, true});
  std::vector<int32_t> prompt = iota_tokens(18);  // 4 full blocks + 2
  s.add(make_req(1, prompt, {"", "tenantA", ""}));
  step(s);
  s.finish(1);

  s.add(make_req(2, prompt, {"", "tenantA", ""}));    // same namespace: 16 cached tokens
  s.add(make_req(3, prompt, {"", "tenantB", ""}));    // other tenant: none
  s.add(make_req(4, prompt, {"", "tenantA", "salt"}));  // other salt in the tenant: none
  SchedulerOutput out = step(s);
  ASSERT_EQ(out.seqs.size(), 3u);
  EXPECT_EQ(out.seqs[0].begin, 16);
  EXPECT_EQ(out.seqs[0].n, 2);
  EXPECT_EQ(s.find(2)->n_cached_prompt, 16);
  EXPECT_EQ(out.seqs[1].begin, 0);
  EXPECT_EQ(s.find(3)->n_cached_prompt, 0);
  EXPECT_EQ(s.find(4)->n_cached_prompt, 0);
  EXPECT_EQ(s.n_prefix_hit_tokens(), 16);
}

// aLoRA-style split lineage: blocks before lineage_block carry the base keys,
// later ones the adapter's. The base and the adapter then hit each other's
// base-lineage blocks, and nothing of the adapter-lineage tail leaks.
TEST(Scheduler, SplitLineageIsSharedBothWays) {
  KvManager kv(64, kBs);
  Scheduler s(&kv, {512, 8, true});
  const ExtraKeys base{"", "t", ""};
  const ExtraKeys adapter{"adapter-id", "t", ""};
  auto run_to_end = [&](RequestId id) {
    while (s.find(id)->n_computed < s.find(id)->n_prompt) step(s);
    s.finish(id);
  };
  // The adapter first: 5 blocks, the invocation starts in block 3 (token 13).
  auto a = make_req(1, iota_tokens(20), adapter);
  a->cache.base_keys = base;
  a->cache.base_blocks = 13 / kBs;  // 3 blocks end at or before token 13
  s.add(a);
  step(s);
  EXPECT_EQ(s.find(1)->n_cached_prompt, 0);
  run_to_end(1);
  // The base with the same context hits exactly the 3 base-lineage blocks.
  s.add(make_req(2, iota_tokens(24), base));
  step(s);
  EXPECT_EQ(s.find(2)->n_cached_prompt, 3 * kBs);
  run_to_end(2);
  // An adapter request whose prefix the base computed hits the base blocks
  // up to its own lineage switch, and its own adapter-lineage blocks after.
  auto c = make_req(3, iota_tokens(22), adapter);
  c->cache.base_keys = base;
  c->cache.base_blocks = 3;
  s.add(c);
  step(s);
  EXPECT_EQ(s.find(3)->n_cached_prompt, 5 * kBs);  // 3 base + 2 adapter blocks from request 1
  run_to_end(3);
  // Another adapter with the same switch point gets only the base blocks.
  auto d = make_req(4, iota_tokens(22), ExtraKeys{"other-adapter", "t", ""});
  d->cache.base_keys = base;
  d->cache.base_blocks = 3;
  s.add(d);
  step(s);
  EXPECT_EQ(s.find(4)->n_cached_prompt, 3 * kBs);
}

TEST(Scheduler, GeneratedBlocksAreCachedToo) {
  KvManager kv(64, kBs);
  Scheduler s(&kv, {512, 8, true});
  s.add(make_req(1, iota_tokens(6)));
  for (int i = 0; i < 4; ++i) step(s);  // prompt + 3 decode steps: 6 + 3 computed, 4 sampled
  std::vector<int32_t> full = s.find(1)->tokens;
  ASSERT_EQ(full.size(), 10u);
  s.finish(1);
  s.add(make_req(2, full));  // the conversation continues from the generated text
  SchedulerOutput out = step(s);
  EXPECT_EQ(out.seqs[0].begin, 8);  // two full blocks, one of them holding generated tokens
}

TEST(Scheduler, NoPrefixCachingMeansNoHits) {
  KvManager kv(64, kBs);
  Scheduler s(&kv, {512, 8, false});
  s.add(make_req(1, iota_tokens(18)));
  step(s);
  s.finish(1);
  s.add(make_req(2, iota_tokens(18)));
  SchedulerOutput out = step(s);
  EXPECT_EQ(out.seqs[0].begin, 0);
  EXPECT_EQ(s.n_prefix_hit_tokens(), 0);
}

TEST(Scheduler, PreemptsTheLatestAndRecomputesItLater) {
  KvManager kv(6, kBs);  // 24 tokens of KV
  Scheduler s(&kv, {512, 8, true});
  s.add(make_req(1, iota_tokens(8, 0)));
  s.add(make_req(2, iota_tokens(8, 500)));
  step(s);  // both prefilled: 4 blocks held
  // Each decodes; at 12 tokens each they need 6 blocks; the 13th token needs a 7th.
  bool preempted = false;
  for (int i = 0; i < 12 && !preempted; ++i) {
    SchedulerOutput out = step(s);
    if (!out.preempted.empty()) {
      preempted = true;
      EXPECT_EQ(out.preempted, std::vector<RequestId>{2});
      ASSERT_EQ(out.seqs.size(), 1u);
      EXPECT_EQ(out.seqs[0].req->id, 1u);
    }
  }
  ASSERT_TRUE(preempted);
  SchedRequest* r2 = s.find(2);
  EXPECT_EQ(r2->state, RequestState::kWaiting);
  EXPECT_EQ(r2->n_computed, 0);
  EXPECT_GT(r2->tokens.size(), 8u);  // keeps what it generated
  const size_t kept = r2->tokens.size();
  s.finish(1);
  SchedulerOutput out = step(s);  // 2 comes back first, recomputing prompt + output
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].req->id, 2u);
  EXPECT_EQ(out.seqs[0].begin + out.seqs[0].n, static_cast<int32_t>(kept));
  EXPECT_TRUE(out.seqs[0].sample);
  EXPECT_EQ(s.n_preemptions(), 1);
}

TEST(Scheduler, ARequestLargerThanThePoolIsAborted) {
  KvManager kv(4, kBs);
  Scheduler s(&kv, {512, 8, true});
  s.add(make_req(1, iota_tokens(40)));
  s.add(make_req(2, iota_tokens(5)));
  SchedulerOutput out = step(s);
  EXPECT_EQ(out.aborted, std::vector<RequestId>{1});
  EXPECT_EQ(s.find(1), nullptr);
  ASSERT_EQ(out.seqs.size(), 1u);  // the next one still runs in the same step
  EXPECT_EQ(out.seqs[0].req->id, 2u);
}

TEST(Scheduler, FinishWhileWaitingOrRunningFreesEverything) {
  KvManager kv(16, kBs);
  Scheduler s(&kv, {8, 8, true});
  s.add(make_req(1, iota_tokens(20)));
  s.add(make_req(2, iota_tokens(20, 900)));
  step(s);  // 1 partially prefilled, 2 waiting
  s.finish(2);
  s.finish(1);
  s.finish(99);  // unknown: ignored
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(kv.usage().n_used, 0);
}

// Many requests of random sizes through a small pool with preemption: every
// request ends with exactly its tokens, the budget is respected every step,
// and at the end no block is held.
TEST(Scheduler, RandomWorkloadRunsToCompletion) {
  std::mt19937 rng(42);
  int64_t total_preemptions = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const int32_t n_blocks = 12 + static_cast<int32_t>(rng() % 20);
    KvManager kv(n_blocks, kBs);
    const int32_t budget = 4 + static_cast<int32_t>(rng() % 40);
    Scheduler s(&kv, {budget, 1 + static_cast<int32_t>(rng() % 6), trial % 2 == 0});
    std::map<RequestId, int32_t> want_total;  // prompt + max new tokens
    std::map<RequestId, int32_t> done_len;
    const int n_req = 30;
    for (RequestId id = 1; id <= n_req; ++id) {
      const int32_t plen = 1 + static_cast<int32_t>(rng() % 20);
      std::vector<int32_t> toks(plen);
      for (auto& t : toks) t = static_cast<int32_t>(rng() % 3);  // small alphabet: many shared prefixes
      want_total[id] = plen + 1 + static_cast<int32_t>(rng() % 12);
      s.add(make_req(id, std::move(toks)));
    }
    int steps = 0;
    while (s.has_work() && steps < 20000) {
      ++steps;
      SchedulerOutput out = s.schedule();
      ASSERT_LE(out.n_tokens(), budget);
      for (RequestId id : out.aborted) done_len[id] = -1;
      s.on_step_done(out);
      for (const auto& q : out.seqs) {
        ASSERT_EQ(q.req->n_computed, q.begin + q.n);
        ASSERT_GE(kv.num_slots(q.req->id), q.req->n_computed);
        if (!q.sample) continue;
        const RequestId id = q.req->id;
        if (static_cast<int32_t>(q.req->tokens.size()) + 1 >= want_total[id]) {
          done_len[id] = static_cast<int32_t>(q.req->tokens.size()) + 1;
          s.finish(id);
        } else {
          s.append_token(id, static_cast<int32_t>(rng() % 3));
        }
      }
      const KvUsage u = kv.usage();
      ASSERT_EQ(u.n_used + u.n_cached + u.n_free, u.n_total);
    }
    ASSERT_FALSE(s.has_work()) << "trial " << trial << " did not finish";
    for (const auto& [id, total] : want_total) {
      // Requests are at most 32 tokens (8 blocks) and the pool has 12 or
      // more, so none is aborted and each reaches exactly its length.
      EXPECT_EQ(done_len[id], total) << "trial " << trial << " request " << id;
    }
    EXPECT_EQ(kv.usage().n_used, 0);
    total_preemptions += s.n_preemptions();
  }
  EXPECT_GT(total_preemptions, 0);  // the pools were small enough to force it
}

}  // namespace
}  // namespace agentkv

namespace agentkv {
namespace {

SchedRequest* background_req(RequestId id, std::vector<int32_t> tokens) {
  auto r = make_req(id, std::move(tokens));
  r->background = true;
  return r;
}

int32_t rows_of(const SchedulerOutput& out, RequestId id) {
  int32_t n = 0;
  for (const auto& q : out.seqs) n += q.req->id == id ? q.n + q.work : 0;
  return n;
}

// 64-row steps, 8 running, the given background reserve.
SchedulerConfig small_step_config(int32_t reserve) {
  SchedulerConfig cfg{/*max_batch_tokens=*/64, /*max_running=*/8, true};
  cfg.background_reserve = reserve;
  return cfg;
}

// A background request runs on what foreground requests leave of a step, at
// most background_rows of it while one of them is active, and on the whole
// step once none is.
TEST(SchedulerBackground, TakesOnlyTheRowsOthersLeave) {
  KvManager kv(256, kBs);
  SchedulerConfig cfg{/*max_batch_tokens=*/32, /*max_running=*/8, true};
  cfg.background_rows = 8;
  Scheduler s(&kv, cfg);
  s.add(background_req(9, iota_tokens(100, 900)));
  s.add(make_req(1, iota_tokens(60)));
  EXPECT_EQ(s.n_waiting(), 1);
  EXPECT_EQ(s.n_background_waiting(), 1);
  SchedulerOutput out = step(s);  // request 1 fills the step: 32 rows
  EXPECT_EQ(rows_of(out, 1), 32);
  EXPECT_EQ(rows_of(out, 9), 0);
  out = step(s);  // 28 rows of request 1 leave 4
  EXPECT_EQ(rows_of(out, 1), 28);
  EXPECT_EQ(rows_of(out, 9), 4);
  out = step(s);  // request 1 decodes (1 row): the background gets its cap
  EXPECT_EQ(rows_of(out, 1), 1);
  EXPECT_EQ(rows_of(out, 9), 8);
  s.finish(1);
  out = step(s);  // alone: the whole step
  EXPECT_EQ(rows_of(out, 9), 32);
}

// A foreground request that arrives is admitted before a waiting background
// one, whatever the arrival order.
TEST(SchedulerBackground, WaitsBehindEveryForegroundRequest) {
  KvManager kv(256, kBs);
  SchedulerConfig cfg{/*max_batch_tokens=*/16, /*max_running=*/8, true};
  cfg.background_rows = 0;
  Scheduler s(&kv, cfg);
  s.add(background_req(9, iota_tokens(8, 900)));
  s.add(make_req(1, iota_tokens(40)));
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(rows_of(step(s), 9), 0) << i;  // background_rows 0: nothing while 1 runs
  s.finish(1);
  EXPECT_EQ(rows_of(step(s), 9), 8);
}

// With a reserve, background work runs under a load that leaves no rows and
// no queue slot: the reserve is held back from the others only while
// background work exists, and one background request is admitted beside
// max_running although foreground requests wait.
TEST(SchedulerBackground, AReserveRunsItUnderSaturation) {
  KvManager kv(256, kBs);
  SchedulerConfig cfg{/*max_batch_tokens=*/32, /*max_running=*/2, true};
  cfg.background_rows = 0;
  cfg.background_reserve = 4;
  Scheduler s(&kv, cfg);
  s.add(make_req(1, iota_tokens(36, 100)));
  for (RequestId id = 2; id <= 3; ++id) s.add(make_req(id, iota_tokens(200, 1000 * id)));
  SchedulerOutput out = step(s);  // no background work: nothing held back
  EXPECT_EQ(rows_of(out, 1), 32);
  s.add(background_req(9, iota_tokens(10, 900)));
  s.add(background_req(8, iota_tokens(10, 800)));
  out = step(s);  // foreground requests wait: still 9 is admitted, on the reserve
  EXPECT_GE(s.n_waiting(), 1);
  EXPECT_EQ(rows_of(out, 1) + rows_of(out, 2), 28);
  EXPECT_EQ(rows_of(out, 9), 4);
  EXPECT_EQ(rows_of(out, 8), 0);  // one background request at a time
  EXPECT_EQ(s.n_background_running(), 1);
  out = step(s);
  EXPECT_EQ(rows_of(out, 9), 4);
  out = step(s);  // 9's last 2 rows; the rest of the reserve goes unused
  EXPECT_EQ(rows_of(out, 9), 2);
  s.finish(9);
  out = step(s);  // 8's turn, on the reserve
  EXPECT_EQ(rows_of(out, 8), 4);
  s.finish(8);
  out = step(s);  // no background work left: the whole step is the others'
  EXPECT_EQ(rows_of(out, 8), 0);
  int32_t fg = 0;
  for (RequestId id = 1; id <= 3; ++id) fg += rows_of(out, id);
  EXPECT_EQ(fg, 32);
}

// Short of blocks, a foreground request takes the background request's
// blocks first without a reserve; with one, the latest admitted foreground
// request gives way instead (here the request itself), and the background
// request keeps running.
TEST(SchedulerBackground, AReserveKeepsItsBlocksAgainstForegroundGrowth) {
  for (const int32_t reserve : {0, 4}) {
    KvManager kv(8, kBs);  // 32 tokens
    Scheduler s(&kv, small_step_config(reserve));
    s.add(make_req(1, iota_tokens(8, 100)));
    s.add(make_req(2, iota_tokens(8, 200)));
    s.add(background_req(9, iota_tokens(12, 900)));
    SchedulerOutput out = step(s);  // 2 + 2 + 3 blocks, all prompts done
    ASSERT_EQ(rows_of(out, 9), 12) << reserve;
    out = step(s);  // 1 takes the last free block; 2 finds none
    if (reserve == 0) {
      EXPECT_EQ(out.dropped, (std::vector<RequestId>{9}));
      EXPECT_TRUE(out.preempted.empty());
      EXPECT_EQ(s.find(9), nullptr);
    } else {
      EXPECT_TRUE(out.dropped.empty());
      EXPECT_EQ(out.preempted, (std::vector<RequestId>{2}));
      EXPECT_EQ(rows_of(out, 9), 1);  // still decoding
    }
  }
}

// Under a reserve, a foreground request short of blocks with no other
// foreground request to preempt drops the background request rather than
// preempting itself: otherwise it could lose to each next re-run for ever.
TEST(SchedulerBackground, AReserveNeverPreemptsTheLastForegroundRequestForIt) {
  KvManager kv(8, kBs);  // 32 tokens
  Scheduler s(&kv, small_step_config(4));
  s.add(make_req(1, iota_tokens(16, 100)));       // 4 blocks
  s.add(background_req(9, iota_tokens(8, 900)));  // 2 blocks
  ASSERT_EQ(rows_of(step(s), 9), 8);
  SchedulerOutput out;
  for (int i = 0; i < 8 && out.dropped.empty(); ++i) {
    out = step(s);
    ASSERT_TRUE(out.preempted.empty()) << i;
  }
  EXPECT_EQ(out.dropped, (std::vector<RequestId>{9}));  // at request 1's sixth block
  EXPECT_EQ(rows_of(out, 1), 1);
}

// Under a reserve an admission waits for the background request's blocks;
// without one it takes them, and the background request is dropped.
TEST(SchedulerBackground, AReserveMakesAdmissionsWaitForItsBlocks) {
  for (const int32_t reserve : {0, 4}) {
    KvManager kv(8, kBs);  // 32 tokens
    Scheduler s(&kv, small_step_config(reserve));
    s.add(background_req(9, iota_tokens(16, 900)));  // 4 blocks, alone
    ASSERT_EQ(rows_of(step(s), 9), 16) << reserve;
    s.add(make_req(1, iota_tokens(24, 100)));  // 6 blocks: 4 are free
    const SchedulerOutput out = step(s);
    if (reserve == 0) {
      EXPECT_EQ(out.dropped, (std::vector<RequestId>{9}));
      EXPECT_EQ(rows_of(out, 1), 24);
    } else {
      EXPECT_TRUE(out.dropped.empty());
      EXPECT_EQ(rows_of(out, 1), 0);  // waits
      EXPECT_EQ(rows_of(out, 9), 1);
      EXPECT_EQ(s.n_waiting(), 1);
    }
  }
}

// A background request does not take a foreground request's queue slot:
// max_running counts foreground requests.
TEST(SchedulerBackground, DoesNotCountAgainstMaxRunning) {
  KvManager kv(256, kBs);
  Scheduler s(&kv, {/*max_batch_tokens=*/64, /*max_running=*/1, true});
  s.add(background_req(9, iota_tokens(8, 900)));
  ASSERT_EQ(rows_of(step(s), 9), 8);  // alone: admitted
  s.add(make_req(1, iota_tokens(8, 100)));
  const SchedulerOutput out = step(s);
  EXPECT_EQ(rows_of(out, 1), 8);
  EXPECT_EQ(s.n_running(), 2);
}

// Without a reserve (the default) the same load leaves background work no
// row: it waits for the queue to empty.
TEST(SchedulerBackground, WithoutAReserveSaturationStarvesIt) {
  KvManager kv(256, kBs);
  SchedulerConfig cfg{/*max_batch_tokens=*/32, /*max_running=*/2, true};
  cfg.background_rows = 0;
  Scheduler s(&kv, cfg);
  for (RequestId id = 1; id <= 3; ++id) s.add(make_req(id, iota_tokens(60, 100 * id)));
  s.add(background_req(9, iota_tokens(10, 900)));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rows_of(step(s), 9), 0) << i;
  EXPECT_EQ(s.n_background_waiting(), 1);
}

// Under pool pressure a background request is dropped (not requeued) before
// any foreground request is preempted, and never takes a foreground
// request's blocks: it drops itself instead.
TEST(SchedulerBackground, IsDroppedFirstWhenThePoolRunsShort) {
  KvManager kv(8, kBs);  // 32 tokens
  Scheduler s(&kv, {/*max_batch_tokens=*/64, /*max_running=*/8, true});
  s.add(background_req(9, iota_tokens(12, 900)));
  SchedulerOutput out = step(s);  // alone: admitted, 3 blocks
  EXPECT_EQ(rows_of(out, 9), 12);
  s.add(make_req(1, iota_tokens(24)));  // 6 blocks: only 5 are free
  out = step(s);
  EXPECT_EQ(out.dropped, (std::vector<RequestId>{9}));
  EXPECT_TRUE(out.preempted.empty());
  EXPECT_EQ(rows_of(out, 1), 24);
  EXPECT_EQ(s.find(9), nullptr);  // out of the scheduler
  EXPECT_EQ(s.n_dropped(), 1);
  // A background request that needs more blocks than the foreground ones
  // leave drops itself; the foreground request keeps running.
  s.add(background_req(8, iota_tokens(4, 800)));
  for (int i = 0; i < 6 && s.find(8) != nullptr; ++i) {
    out = step(s);
    EXPECT_TRUE(out.preempted.empty()) << i;
  }
  EXPECT_EQ(s.find(8), nullptr);  // dropped itself (in its second step)
  EXPECT_EQ(s.n_dropped(), 2);
  EXPECT_NE(s.find(1), nullptr);
}

}  // namespace
}  // namespace agentkv

namespace agentkv {
namespace {

SchedRequest* priority_req(RequestId id, std::vector<int32_t> tokens) {
  auto r = make_req(id, std::move(tokens));
  r->priority = true;
  return r;
}

// The order requests are admitted in, one per step (max_running grows by one
// request each step as earlier ones keep running).
std::vector<RequestId> admission_order(Scheduler& s, int n) {
  std::vector<RequestId> order;
  for (int i = 0; i < n; ++i) {
    for (const ScheduledSeq& q : step(s).seqs) {
      if (q.begin == 0) order.push_back(q.req->id);
    }
  }
  return order;
}

// Priority requests go ahead of earlier plain ones, in arrival order among
// themselves; after priority_streak of them in a row one plain request goes.
TEST(SchedulerPriority, AheadOfPlainRequestsWithinTheStreak) {
  KvManager kv(1024, kBs);
  SchedulerConfig cfg{/*max_batch_tokens=*/8, /*max_running=*/64, true};
  cfg.priority_streak = 2;
  Scheduler s(&kv, cfg);
  s.add(make_req(1, iota_tokens(8, 100)));
  s.add(make_req(2, iota_tokens(8, 200)));
  for (RequestId id : {11, 12, 13, 14, 15}) s.add(priority_req(id, iota_tokens(8, 100 * id)));
  // A prompt fills the step's 8 rows; later steps admit one each beside the decodes.
  const std::vector<RequestId> order = admission_order(s, 40);
  EXPECT_EQ(order, (std::vector<RequestId>{11, 12, 1, 13, 14, 2, 15}));
}

TEST(SchedulerPriority, StreakZeroIsFirstComeFirstServed) {
  KvManager kv(1024, kBs);
  SchedulerConfig cfg{/*max_batch_tokens=*/8, /*max_running=*/64, true};
  cfg.priority_streak = 0;
  Scheduler s(&kv, cfg);
  s.add(make_req(1, iota_tokens(8, 100)));
  s.add(priority_req(11, iota_tokens(8, 1100)));
  s.add(make_req(2, iota_tokens(8, 200)));
  EXPECT_EQ(admission_order(s, 20), (std::vector<RequestId>{1, 11, 2}));
}

// Alone (no plain request waiting) priority requests are not counted as a
// streak: a plain request arriving later still waits behind new priority ones
// only up to the bound.
TEST(SchedulerPriority, StreakCountsOnlyWhileAPlainRequestWaits) {
  KvManager kv(1024, kBs);
  SchedulerConfig cfg{/*max_batch_tokens=*/8, /*max_running=*/64, true};
  cfg.priority_streak = 1;
  Scheduler s(&kv, cfg);
  s.add(priority_req(11, iota_tokens(8, 1100)));
  s.add(priority_req(12, iota_tokens(8, 1200)));
  EXPECT_EQ(admission_order(s, 1), (std::vector<RequestId>{11}));
  s.add(make_req(1, iota_tokens(8, 100)));
  s.add(priority_req(13, iota_tokens(8, 1300)));
  EXPECT_EQ(admission_order(s, 30), (std::vector<RequestId>{12, 1, 13}));
}

}  // namespace
}  // namespace agentkv
