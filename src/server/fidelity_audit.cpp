#include "server/fidelity_audit.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "util/stats.h"
#include "runtime/request_hooks.h"

namespace agentkv::server {

namespace {

constexpr const char* kRequestsHelp =
    "Requests sampled by the fidelity audit, by outcome: audited (re-run and measured), skipped (the audit "
    "queue was full), dropped (its re-run gave its KV blocks to user requests), failed.";

// One audited request: what its exact re-run needs, and what it served.
struct Audit {
  // The re-run's request: prompt, adapter, tenant, salt.
  std::vector<int32_t> prompt;
  std::string adapter;
  std::string tenant;
  std::string cache_salt;
  std::string scheme;  // applied, from the events
  bool client_logits = false;
  // Per generated position: the token served and the logits it came from.
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

// The re-run's events, gathered for the worker.
struct Rerun {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;
  std::vector<std::vector<float>> logits;
};

class AuditingEngine final : public ServingEngine {
 public:
  AuditingEngine(std::unique_ptr<ServingEngine> inner, FidelityAuditConfig cfg, MetricsRegistry& reg)
      : inner_(std::move(inner)), cfg_(std::move(cfg)), reg_(reg), rng_(cfg_.seed) {
    cfg_.tokens = std::max(cfg_.tokens, 1);
    cfg_.max_pending = std::max(cfg_.max_pending, 1);
    for (const char* r : {"audited", "skipped", "dropped", "failed"}) {
      reg_.counter("agentkv_fidelity_audit_requests_total", kRequestsHelp, {{"result", r}});
    }
    rerun_tokens_ = &reg_.counter("agentkv_fidelity_audit_rerun_tokens_total",
                                  "Prompt and forced tokens of the fidelity audit's exact re-runs.");
    pending_gauge_ = &reg_.gauge("agentkv_fidelity_audit_pending", "Audits waiting for their exact re-run.");
    worker_ = std::thread([this] { work(); });
  }

  ~AuditingEngine() override {
    stop_worker();
    inner_.reset();  // the engine stops before the sinks it holds go
  }

  Result<ServeId> submit(ServeRequest req, ServeSink sink) override {
    const std::string& asked = req.kv_sharing.empty() ? cfg_.default_scheme : req.kv_sharing;
    if (asked == "none" || request_hooks(req).background || req.max_tokens < 1 || !sample()) {
      return inner_->submit(std::move(req), std::move(sink));
    }
    auto a = std::make_shared<Audit>();
    a->prompt = req.prompt;
    a->adapter = req.adapter;
    a->tenant = req.tenant;
    a->cache_salt = req.cache_salt;
    a->scheme = asked;
    a->client_logits = request_hooks(req).return_logits;
    edit_request_hooks(req).return_logits = true;
    ServeSink wrapped = [this, a, sink = std::move(sink)](ServeEvent&& ev) {
      if (!ev.kv_sharing.empty()) a->scheme = ev.kv_sharing;
      // One sample per event when logits are returned; an event whose token
      // ended the request unemitted has logits and no sample: not compared.
      if (!ev.samples.empty() && !ev.logits.empty() && a->tokens.size() < static_cast<size_t>(cfg_.tokens)) {
        a->tokens.push_back(ev.samples.front().id);
        a->logits.push_back(a->client_logits ? ev.logits : std::move(ev.logits));
      }
      if (!a->client_logits) ev.logits = {};
      const bool finished = ev.finish == ServeFinish::kStop || ev.finish == ServeFinish::kLength;
      const bool any = ev.finish != ServeFinish::kNone;
      sink(std::move(ev));
      if (any && finished && !a->tokens.empty()) enqueue(a);
    };
    return inner_->submit(std::move(req), std::move(wrapped));
  }

  void cancel(ServeId id) override { inner_->cancel(id); }
  bool drain(double timeout_s) override {
    stop_worker();  // an audit in flight is cancelled: user requests go first
    return inner_->drain(timeout_s);
  }
  Status load_adapter(const std::string& name, const std::string& path, const std::string& kind) override {
    return inner_->load_adapter(name, path, kind);
  }
  Status unload_adapter(const std::string& name) override { return inner_->unload_adapter(name); }
  std::vector<ServedModel> models() const override { return inner_->models(); }
  Result<SegmentInfo> create_segment(const SegmentSpec& spec) override {
    return inner_->create_segment(spec);
  }
  Status delete_segment(const std::string& id, const std::string& tenant) override {
    return inner_->delete_segment(id, tenant);
  }
  std::vector<SegmentInfo> list_segments(const std::string& tenant) override {
    return inner_->list_segments(tenant);
  }
  std::vector<SegmentSpec> frozen_segment_specs() override { return inner_->frozen_segment_specs(); }
  Status end_session(const std::string& tenant, const std::string& id) override {
    return inner_->end_session(tenant, id);
  }
  ServingStats stats() const override { return inner_->stats(); }
  const Tokenizer& tokenizer() const override { return inner_->tokenizer(); }
  int32_t max_model_len() const override { return inner_->max_model_len(); }
  int32_t vocab_size() const override { return inner_->vocab_size(); }
  int32_t n_layers() const override { return inner_->n_layers(); }

 private:
  bool sample() {
    if (cfg_.rate >= 1) return true;
    std::lock_guard<std::mutex> lk(mu_);
    return std::uniform_real_distribution<double>(0, 1)(rng_) < cfg_.rate;
  }

  void count(const char* result) {
    reg_.counter("agentkv_fidelity_audit_requests_total", kRequestsHelp, {{"result", result}}).inc();
  }

  // On the engine thread: never blocks beyond the queue's mutex.
  void enqueue(std::shared_ptr<Audit> a) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!stopping_ && static_cast<int32_t>(queue_.size()) < cfg_.max_pending) {
        queue_.push_back(std::move(a));
        pending_gauge_->set(static_cast<double>(queue_.size()));
        cv_.notify_one();
        return;
      }
    }
    count("skipped");
  }

  // The engine is called outside mu_, which its thread takes in enqueue().
  void stop_worker() {
    std::optional<ServeId> in_flight;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stopping_) return;
      stopping_ = true;
      in_flight = in_flight_;
    }
    if (in_flight) inner_->cancel(*in_flight);
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  void work() {
    for (;;) {
      std::shared_ptr<Audit> a;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        a = std::move(queue_.front());
        queue_.pop_front();
        pending_gauge_->set(static_cast<double>(queue_.size()));
      }
      rerun(*a);
    }
  }

  void rerun(const Audit& a) {
    ServeRequest r;
    r.prompt = a.prompt;
    r.adapter = a.adapter;
    r.tenant = a.tenant;
    r.cache_salt = a.cache_salt;
    r.kv_sharing = "none";
    ServeRequestHooks& h = edit_request_hooks(r);
    h.forced_tokens = a.tokens;
    h.return_logits = true;
    h.background = true;
    r.max_tokens = static_cast<int32_t>(a.tokens.size());
    r.ignore_eos = true;
    auto run = std::make_shared<Rerun>();
    auto id = inner_->submit(std::move(r), [run](ServeEvent&& ev) {
      std::lock_guard<std::mutex> lk(run->mu);
      if (!ev.logits.empty() && !ev.samples.empty()) run->logits.push_back(std::move(ev.logits));
      if (ev.finish != ServeFinish::kNone) {
        run->error = ev.finish == ServeFinish::kError       ? (ev.error.empty() ? "error" : ev.error)
                     : ev.finish == ServeFinish::kCancelled ? "cancelled"
                                                            : "";
        run->done = true;
        run->cv.notify_all();
      }
    });
    if (!id.is_ok()) return count("failed");
    bool stopping;
    {
      std::lock_guard<std::mutex> lk(mu_);
      in_flight_ = *id;
      stopping = stopping_;
    }
    if (stopping) inner_->cancel(*id);
    {
      std::unique_lock<std::mutex> lk(run->mu);
      run->cv.wait(lk, [&] { return run->done; });
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      in_flight_.reset();
    }
    rerun_tokens_->inc(static_cast<double>(a.prompt.size() + a.tokens.size()));
    if (run->error.rfind("dropped", 0) == 0) return count("dropped");
    if (!run->error.empty() || run->logits.size() != a.logits.size()) return count("failed");
    record(a, run->logits);
  }

  void record(const Audit& a, const std::vector<std::vector<float>>& exact) {
    double kl = 0;
    int64_t agree = 0;
    bool bitwise = true;
    for (size_t j = 0; j < exact.size(); ++j) {
      const std::vector<float>& p = exact[j];
      const std::vector<float>& q = a.logits[j];
      const int64_t n = static_cast<int64_t>(std::min(p.size(), q.size()));
      bitwise =
          bitwise && p.size() == q.size() && std::memcmp(p.data(), q.data(), sizeof(float) * p.size()) == 0;
      kl += kl_divergence(p.data(), q.data(), n);
      const auto top_p = std::max_element(p.begin(), p.begin() + n) - p.begin();
      const auto top_q = std::max_element(q.begin(), q.begin() + n) - q.begin();
      agree += top_p == top_q;
    }
    const double n = static_cast<double>(exact.size());
    const Labels labels = {{"scheme", a.scheme},
                           {"model", a.adapter.empty() ? cfg_.base_model : a.adapter},
                           {"tenant", a.tenant}};
    // Exactly 0 when every row is bitwise the same (kl_divergence clamps rounding).
    reg_.histogram("agentkv_fidelity_audit_kl",
                   "Mean KL(exact || served) in nats over an audited request's first generated positions.",
                   fidelity_audit_kl_buckets(), labels)
        .observe(bitwise ? 0.0 : kl / n);
    reg_.histogram(
            "agentkv_fidelity_audit_top1",
            "Share of an audited request's compared positions whose argmax the exact re-run agrees with.",
            {0.5, 0.75, 0.9, 0.99, 1.0}, labels)
        .observe(static_cast<double>(agree) / n);
    reg_.counter("agentkv_fidelity_audit_bitwise_total",
                 "Audited requests whose every compared logit row equals the exact re-run's, bit for bit.",
                 {{"scheme", a.scheme}})
        .inc(bitwise ? 1.0 : 0.0);
    count("audited");
  }

  std::unique_ptr<ServingEngine> inner_;
  FidelityAuditConfig cfg_;
  MetricsRegistry& reg_;
  Counter* rerun_tokens_ = nullptr;
  Gauge* pending_gauge_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::mt19937_64 rng_;
  std::deque<std::shared_ptr<Audit>> queue_;
  std::optional<ServeId> in_flight_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace

const std::vector<double>& fidelity_audit_kl_buckets() {
  static const std::vector<double> b = {1e-9, 1e-6, 1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3};
  return b;
}

std::unique_ptr<ServingEngine> make_auditing_engine(std::unique_ptr<ServingEngine> inner,
                                                    const FidelityAuditConfig& cfg,
                                                    MetricsRegistry& registry) {
  if (cfg.rate <= 0) return inner;
  return std::make_unique<AuditingEngine>(std::move(inner), cfg, registry);
}

}  // namespace agentkv::server
