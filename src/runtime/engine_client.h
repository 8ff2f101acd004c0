// The one blocking client of a ServingEngine in process, for the commands
// and the benchmarks: submit requests, wait for their events on this thread
// (the server's handlers use the same EventQueue, without blocking).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <vector>

#include "agentkv/serving.h"
#include "util/status.h"

namespace agentkv {

// Called on the waiting thread for each event of a request, in order; `at` is
// when the engine thread delivered it (the sink's clock, not the wake-up's).
using ServeEventFn = std::function<void(const ServeEvent& e, std::chrono::steady_clock::time_point at)>;

// Submits one request and waits for its last event, which it returns. A
// submit error, an error event or a cancellation is the returned error.
Result<ServeEvent> serve_one(ServingEngine& engine, ServeRequest req, const ServeEventFn& on_event = nullptr);

// Submits every request before waiting for any (so the engine may batch
// them), then waits for all; on_event(i, event, at) sees request i's events
// in order. Each result is as serve_one's.
using ServeEventAtFn =
    std::function<void(size_t i, const ServeEvent& e, std::chrono::steady_clock::time_point at)>;
std::vector<Result<ServeEvent>> serve_together(ServingEngine& engine, std::vector<ServeRequest> reqs,
                                               const ServeEventAtFn& on_event = nullptr);

}  // namespace agentkv
