// The fidelity audit (server/fidelity_audit.h) around the fake engine: which
// requests it samples, the exact re-run it submits, what it records, that
// the client sees its events unchanged, and that it stops cleanly with a
// re-run in flight (under ASan and UBSan in the sanitizer stage).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "fake_serving_engine.h"
#include "server/fidelity_audit.h"
#include "runtime/request_hooks.h"

namespace agentkv::server {
namespace {

using test::FakeServingEngine;

struct Served {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool saw_logits = false;
  std::vector<int32_t> tokens;
};

ServeSink collect(Served* s) {
  return [s](ServeEvent&& ev) {
    std::lock_guard<std::mutex> lk(s->mu);
    s->saw_logits |= !ev.logits.empty();
    for (const SampleResult& x : ev.samples) s->tokens.push_back(x.id);
    if (ev.finish != ServeFinish::kNone) s->done = true;
    s->cv.notify_all();
  };
}

void wait(Served* s) {
  std::unique_lock<std::mutex> lk(s->mu);
  s->cv.wait(lk, [&] { return s->done; });
}

// The exposition once `line` appears in it (the worker runs on its own thread).
std::string wait_for(MetricsRegistry& reg, const std::string& line) {
  for (int i = 0; i < 2000; ++i) {
    std::string text = reg.expose();
    if (text.find(line) != std::string::npos) return text;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ADD_FAILURE() << "never saw: " << line << "\n" << reg.expose();
  return "";
}

ServeRequest request(const std::string& scheme) {
  ServeRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 3;
  r.kv_sharing = scheme;
  r.tenant = "t1";
  return r;
}

TEST(FidelityAudit, RateZeroIsTheEngineItself) {
  auto fake = std::make_unique<FakeServingEngine>();
  ServingEngine* raw = fake.get();
  MetricsRegistry reg;
  auto e = make_auditing_engine(std::move(fake), FidelityAuditConfig{}, reg);
  EXPECT_EQ(e.get(), raw);
  EXPECT_EQ(reg.expose().find("fidelity_audit"), std::string::npos);
}

TEST(FidelityAudit, ReRunsExactlyAndRecordsWhatTheSchemeCost) {
  auto fake = std::make_unique<FakeServingEngine>();
  FakeServingEngine* f = fake.get();
  f->approximate_schemes = {"naive"};
  MetricsRegistry reg;
  FidelityAuditConfig cfg;
  cfg.rate = 1.0;
  cfg.tokens = 2;
  cfg.base_model = "smol";
  auto e = make_auditing_engine(std::move(fake), cfg, reg);
  Served a;
  ASSERT_TRUE(e->submit(request("naive"), collect(&a)).is_ok());
  wait(&a);
  EXPECT_FALSE(a.saw_logits);  // the client did not ask for them
  const std::string text = wait_for(reg, "agentkv_fidelity_audit_requests_total{result=\"audited\"} 1");
  // The re-run: scheme none, the first two served tokens forced, background.
  const std::vector<ServeRequest> sub = f->submitted_requests();
  ASSERT_EQ(sub.size(), 2u);
  EXPECT_TRUE(request_hooks(sub[0]).return_logits);
  const ServeRequest& rr = sub[1];
  EXPECT_EQ(rr.kv_sharing, "none");
  EXPECT_TRUE(request_hooks(rr).background && request_hooks(rr).return_logits && rr.ignore_eos);
  EXPECT_EQ(rr.prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(rr.tenant, "t1");
  EXPECT_EQ(request_hooks(rr).forced_tokens, std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + 2));
  EXPECT_EQ(rr.max_tokens, 2);
  EXPECT_NE(text.find("agentkv_fidelity_audit_kl_count{scheme=\"naive\",model=\"smol\",tenant=\"t1\"} 1"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("agentkv_fidelity_audit_kl_sum{scheme=\"naive\",model=\"smol\",tenant=\"t1\"} 0\n"),
            std::string::npos)
      << text;  // moved logits: KL > 0
  EXPECT_NE(text.find("agentkv_fidelity_audit_bitwise_total{scheme=\"naive\"} 0"), std::string::npos) << text;
  // Argmax still agrees everywhere: every observation above 0.99.
  EXPECT_NE(
      text.find(
          "agentkv_fidelity_audit_top1_bucket{scheme=\"naive\",model=\"smol\",tenant=\"t1\",le=\"0.99\"} 0"),
      std::string::npos)
      << text;
}

TEST(FidelityAudit, AnExactSchemeIsZeroBitForBitAndNoneIsNeverSampled) {
  auto fake = std::make_unique<FakeServingEngine>();
  FakeServingEngine* f = fake.get();
  MetricsRegistry reg;
  FidelityAuditConfig cfg;
  cfg.rate = 1.0;
  auto e = make_auditing_engine(std::move(fake), cfg, reg);
  Served none, exact;
  ServeRequest r = request("alora");
  edit_request_hooks(r).return_logits = true;  // the client's own: kept
  ASSERT_TRUE(e->submit(request("none"), collect(&none)).is_ok());
  ASSERT_TRUE(e->submit(r, collect(&exact)).is_ok());
  wait(&none);
  wait(&exact);
  EXPECT_TRUE(exact.saw_logits);
  const std::string text = wait_for(reg, "agentkv_fidelity_audit_requests_total{result=\"audited\"} 1");
  EXPECT_EQ(f->submitted_requests().size(), 3u);  // two served, one re-run
  EXPECT_NE(text.find("agentkv_fidelity_audit_kl_sum{scheme=\"alora\",model=\"base\",tenant=\"t1\"} 0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("agentkv_fidelity_audit_bitwise_total{scheme=\"alora\"} 1"), std::string::npos) << text;
}

TEST(FidelityAudit, StopsWithAReRunInFlight) {
  auto fake = std::make_unique<FakeServingEngine>();
  FakeServingEngine* f = fake.get();
  f->tick = std::chrono::milliseconds(50);  // the re-run takes a while
  MetricsRegistry reg;
  FidelityAuditConfig cfg;
  cfg.rate = 1.0;
  auto e = make_auditing_engine(std::move(fake), cfg, reg);
  Served a;
  ASSERT_TRUE(e->submit(request("naive"), collect(&a)).is_ok());
  wait(&a);
  for (int i = 0; i < 500 && f->submitted_requests().size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_TRUE(e->drain(5.0));
  e.reset();  // joins the worker; the re-run was cancelled
}

}  // namespace
}  // namespace agentkv::server
