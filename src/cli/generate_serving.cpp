#include "cli/generate_serving.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

namespace agentkv::cli {
namespace {

// The events of one request, handed from the engine thread to this one.
struct EventQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<ServeEvent> events;

  void push(ServeEvent&& e) {
    {
      std::lock_guard<std::mutex> l(mu);
      events.push_back(std::move(e));
    }
    cv.notify_one();
  }
  ServeEvent pop() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return !events.empty(); });
    ServeEvent e = std::move(events.front());
    events.pop_front();
    return e;
  }
};

// Submits `req` and waits for its last event, passing text on.
Result<ServeEvent> run_one(ServingEngine& engine, ServeRequest req,
                           const std::function<void(const std::string&)>& on_text,
                           std::vector<SampleResult>* samples = nullptr) {
  auto q = std::make_shared<EventQueue>();
  AKV_ASSIGN_OR_RETURN(ServeId id,
                       engine.submit(std::move(req), [q](ServeEvent&& e) { q->push(std::move(e)); }));
  (void)id;
  for (;;) {
    ServeEvent e = q->pop();
    if (on_text && !e.text.empty()) on_text(e.text);
    if (samples) samples->insert(samples->end(), e.samples.begin(), e.samples.end());
    if (e.finish == ServeFinish::kNone) continue;
    if (e.finish == ServeFinish::kError) return make_error(ErrorCode::kInternal, e.error);
    if (e.finish == ServeFinish::kCancelled)
      return make_error(ErrorCode::kUnavailable, "the request was cancelled");
    return e;
  }
}

}  // namespace

Result<ServingGenerateResult> generate_serving(ServingEngine& engine, const std::vector<int32_t>& prompt,
                                               const ServingGenerateOptions& o,
                                               const std::function<void(const std::string&)>& on_text) {
  ServeRequest req;
  req.prompt = prompt;
  req.sampling = o.sampling;
  req.max_tokens = o.gen.max_tokens;
  req.stop = o.gen.stop;
  req.ignore_eos = o.gen.ignore_eos;
  req.kv_sharing = o.kv_sharing;
  if (o.base_first) {
    ServeRequest base = req;
    base.adapter.clear();
    base.max_tokens = 1;  // the prompt's KV is what the adapter may reuse
    AKV_RETURN_IF_ERROR(run_one(engine, std::move(base), nullptr).status().with_context("--base-first"));
  }
  req.adapter = o.adapter;
  const auto t0 = std::chrono::steady_clock::now();
  ServingGenerateResult r;
  AKV_ASSIGN_OR_RETURN(ServeEvent last, run_one(engine, std::move(req), on_text, &r.samples));
  r.prompt_tokens = last.prompt_tokens;
  r.cached_tokens = last.cached_tokens;
  r.completion_tokens = last.completion_tokens;
  r.ttft_s = last.ttft_s;
  r.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.finish = serve_finish_name(last.finish);
  return r;
}

}  // namespace agentkv::cli
