#include "cli/generate_serving.h"

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>

namespace agentkv::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The events of one request, handed from the engine thread to this one with
// the time the engine delivered each.
struct EventQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<ServeEvent, Clock::time_point>> events;

  void push(ServeEvent&& e) {
    const Clock::time_point at = Clock::now();
    {
      std::lock_guard<std::mutex> l(mu);
      events.emplace_back(std::move(e), at);
    }
    cv.notify_one();
  }
  std::pair<ServeEvent, Clock::time_point> pop() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return !events.empty(); });
    auto e = std::move(events.front());
    events.pop_front();
    return e;
  }
};

}  // namespace

Result<ServeEvent> serve_one(ServingEngine& engine, ServeRequest req, const ServeEventFn& on_event) {
  auto q = std::make_shared<EventQueue>();
  AKV_ASSIGN_OR_RETURN(ServeId id,
                       engine.submit(std::move(req), [q](ServeEvent&& e) { q->push(std::move(e)); }));
  (void)id;
  for (;;) {
    auto [e, at] = q->pop();
    if (on_event) on_event(e, at);
    if (e.finish == ServeFinish::kNone) continue;
    if (e.finish == ServeFinish::kError) return make_error(ErrorCode::kInternal, e.error);
    if (e.finish == ServeFinish::kCancelled)
      return make_error(ErrorCode::kUnavailable, "the request was cancelled");
    return std::move(e);
  }
}

Result<ServingGenerateResult> generate_serving(ServingEngine& engine, const std::vector<int32_t>& prompt,
                                               const ServingGenerateOptions& o,
                                               const std::function<void(const std::string&)>& on_text) {
  ServeRequest req;
  req.prompt = prompt;
  req.sampling = o.sampling;
  req.max_tokens = o.max_tokens;
  req.stop = o.stop;
  req.ignore_eos = o.ignore_eos;
  req.kv_sharing = o.kv_sharing;
  if (o.base_first) {
    ServeRequest base = req;
    base.adapter.clear();
    base.max_tokens = 1;  // the prompt's KV is what the adapter may reuse
    AKV_RETURN_IF_ERROR(serve_one(engine, std::move(base)).status().with_context("--base-first"));
  }
  req.adapter = o.adapter;
  const auto t0 = Clock::now();
  ServingGenerateResult r;
  AKV_ASSIGN_OR_RETURN(ServeEvent last,
                       serve_one(engine, std::move(req), [&](const ServeEvent& e, Clock::time_point) {
                         if (on_text && !e.text.empty()) on_text(e.text);
                         r.samples.insert(r.samples.end(), e.samples.begin(), e.samples.end());
                       }));
  r.prompt_tokens = last.prompt_tokens;
  r.cached_tokens = last.cached_tokens;
  r.completion_tokens = last.completion_tokens;
  r.ttft_s = last.ttft_s;
  r.total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.finish = serve_finish_name(last.finish);
  return r;
}

}  // namespace agentkv::cli
