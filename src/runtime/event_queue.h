// The hand-off of one request's events from the engine thread to the thread
// that waits for them (an HTTP handler, a command, a benchmark): the
// ServeSink pushes (never blocks beyond a short lock) and the waiter pops,
// with the time the engine delivered each event.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include "agentkv/serving.h"

namespace agentkv {

struct TimedEvent {
  ServeEvent event;
  std::chrono::steady_clock::time_point arrived;  // when the engine delivered it
  int choice = 0;  // which of the request's choices (n > 1, several prompts) it belongs to
};

class EventQueue {
 public:
  void push(ServeEvent&& e, int choice = 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      q_.push_back({std::move(e), std::chrono::steady_clock::now(), choice});
    }
    cv_.notify_one();
  }

  // Everything queued, waiting up to `timeout` for at least one event.
  std::vector<TimedEvent> pop_all(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !q_.empty(); });
    std::vector<TimedEvent> out(std::make_move_iterator(q_.begin()), std::make_move_iterator(q_.end()));
    q_.clear();
    return out;
  }

  // The next event, waiting as long as it takes.
  TimedEvent pop() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !q_.empty(); });
    TimedEvent e = std::move(q_.front());
    q_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TimedEvent> q_;
};

}  // namespace agentkv
