#include "runtime/engine_client.h"

#include <memory>
#include <utility>

#include "runtime/event_queue.h"

namespace agentkv {
namespace {

// Reads one submitted request's events up to its last.
Result<ServeEvent> wait_last(EventQueue& q, const ServeEventFn& on_event) {
  for (;;) {
    TimedEvent te = q.pop();
    ServeEvent& e = te.event;
    if (on_event) on_event(e, te.arrived);
    if (e.finish == ServeFinish::kNone) continue;
    if (e.finish == ServeFinish::kError) return make_error(ErrorCode::kInternal, e.error);
    if (e.finish == ServeFinish::kCancelled) return make_error(ErrorCode::kUnavailable, "the request was cancelled");
    return std::move(e);
  }
}

Result<std::shared_ptr<EventQueue>> submit(ServingEngine& engine, ServeRequest req) {
  auto q = std::make_shared<EventQueue>();
  AKV_ASSIGN_OR_RETURN(ServeId id, engine.submit(std::move(req), [q](ServeEvent&& e) { q->push(std::move(e)); }));
  (void)id;
  return q;
}

}  // namespace

Result<ServeEvent> serve_one(ServingEngine& engine, ServeRequest req, const ServeEventFn& on_event) {
  AKV_ASSIGN_OR_RETURN(std::shared_ptr<EventQueue> q, submit(engine, std::move(req)));
  return wait_last(*q, on_event);
}

std::vector<Result<ServeEvent>> serve_together(ServingEngine& engine, std::vector<ServeRequest> reqs,
                                               const ServeEventAtFn& on_event) {
  std::vector<Result<std::shared_ptr<EventQueue>>> queues;
  queues.reserve(reqs.size());
  for (ServeRequest& r : reqs) queues.push_back(submit(engine, std::move(r)));
  std::vector<Result<ServeEvent>> out;
  out.reserve(reqs.size());
  for (size_t i = 0; i < queues.size(); ++i) {
    if (!queues[i].is_ok()) {
      out.push_back(queues[i].status());
      continue;
    }
    out.push_back(wait_last(*queues[i].value(), [&](const ServeEvent& e, std::chrono::steady_clock::time_point at) {
      if (on_event) on_event(i, e, at);
    }));
  }
  return out;
}

}  // namespace agentkv
