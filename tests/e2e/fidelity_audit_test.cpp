// The fidelity audit on the real engine: the KL it exports for a request
// served under naive segment reuse equals, to the last bit, the KL of that
// request's served logits against an independent exact run (a fresh engine,
// no cache, the served tokens forced). So the re-run's background
// scheduling, its prefix hits and its teacher forcing change nothing.
#include "server/fidelity_audit.h"

#include <gtest/gtest.h>

#include <charconv>
#include <chrono>
#include <filesystem>
#include <thread>

#include "../ci_required.h"
#include "agentkv/serving.h"
#include "serving_util.h"
#include "util/stats.h"
#include "runtime/request_hooks.h"

namespace agentkv {
namespace {

using namespace agentkv::testing;

std::unique_ptr<ServingEngine> engine() {
  ServingOptions o;
  o.model_path = model_path();
  o.n_threads = 2;
  o.kv_cache_mb = 64;
  auto e = create_serving_engine(o);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return e.is_ok() ? std::move(e).value() : nullptr;
}

// The value of one exposition line that starts with `prefix`, or -1.
double exposed(const std::string& text, const std::string& prefix) {
  const size_t at = text.find(prefix);
  if (at == std::string::npos) return -1;
  const size_t end = text.find('\n', at);
  const std::string v = text.substr(at + prefix.size(), end - at - prefix.size());
  double x = -1;
  std::from_chars(v.data(), v.data() + v.size(), x);
  return x;
}

TEST(FidelityAuditE2E, KlEqualsAnIndependentExactRun) {
  AGENTKV_REQUIRE(!std::filesystem::exists(model_path()), "model not found: " << model_path());
  auto inner = engine();
  ASSERT_TRUE(inner);
  server::MetricsRegistry reg;
  server::FidelityAuditConfig cfg;
  cfg.rate = 1.0;
  cfg.tokens = 8;
  cfg.base_model = "m";
  auto eng = server::make_auditing_engine(std::move(inner), cfg, reg);
  const std::vector<int32_t> document = doc(3, 160);
  // The document cached behind one prefix (none: not audited), then reused
  // behind another under naive.
  ASSERT_EQ(serve_requests(*eng, {greedy_request(cat({doc(1, 20), document}), 1)})[0].finish,
            ServeFinish::kLength);
  const std::vector<int32_t> prompt = cat({doc(2, 30), document, doc(4, 12)});
  ServeRequest req = greedy_request(prompt, 8);
  req.kv_sharing = "naive";
  edit_request_hooks(req).return_logits = true;
  const Outcome served = serve_requests(*eng, {req})[0];
  ASSERT_EQ(served.finish, ServeFinish::kLength) << served.error;
  ASSERT_GE(served.reused, 128);
  ASSERT_EQ(served.logits.size(), 8u);
  std::string text;
  for (int i = 0; i < 3000; ++i) {
    text = reg.expose();
    if (text.find("agentkv_fidelity_audit_requests_total{result=\"audited\"} 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string labels = "{scheme=\"naive\",model=\"m\",tenant=\"\"}";
  ASSERT_EQ(exposed(text, "agentkv_fidelity_audit_kl_count" + labels + " "), 1) << text;
  const double audit_kl = exposed(text, "agentkv_fidelity_audit_kl_sum" + labels + " ");

  auto fresh = engine();
  ASSERT_TRUE(fresh);
  ServeRequest exact = greedy_request(prompt, 8);
  ServeRequestHooks& h = edit_request_hooks(exact);
  h.forced_tokens = served.tokens;
  h.return_logits = true;
  const Outcome ref = serve_requests(*fresh, {exact})[0];
  ASSERT_EQ(ref.logits.size(), 8u);
  double kl = 0;
  for (size_t j = 0; j < ref.logits.size(); ++j) {
    kl += kl_divergence(ref.logits[j].data(), served.logits[j].data(),
                        static_cast<int64_t>(ref.logits[j].size()));
  }
  kl /= 8.0;
  std::printf("[measured] naive, 8 positions: audit KL %.17g, independent %.17g\n", audit_kl, kl);
  EXPECT_GT(kl, 0.0);
  EXPECT_EQ(audit_kl, kl);  // the same doubles summed in the same order
}

}  // namespace
}  // namespace agentkv
