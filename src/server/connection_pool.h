// The httplib::TaskQueue behind the HTTP server: one thread per open
// connection, started on demand, up to a cap on open connections.
//
// cpp-httplib serves a connection on one thread from accept to close, and its
// stock ThreadPool has a fixed size: with 128 threads, 128 idle clients made
// every other client wait in the queue. Here a connection never waits for a
// thread (an idle worker takes it, or a new thread starts), threads that stay
// idle for a while exit, and past `max_open` connections the job (httplib's
// "serve this socket") runs at once on the accepting thread with
// over_capacity() true, so the server can answer 503 and close without
// spending a thread. A connection waiting on a slow client costs a blocked
// thread, no CPU (see connection_stream.h for the deadlines that bound it).
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

namespace agentkv::server {

class ConnectionPool : public httplib::TaskQueue {
 public:
  // `idle_exit_s`: how long a worker without a connection waits before exiting.
  explicit ConnectionPool(size_t max_open, double idle_exit_s = 30);
  ~ConnectionPool() override;

  void enqueue(std::function<void()> fn) override;
  // Serves the queued connections, then joins every worker.
  void shutdown() override;

  // True on the thread running a job that enqueue() turned away.
  static bool over_capacity();

  size_t open() const;      // connections queued or being served
  size_t threads() const;   // worker threads alive
  size_t rejected() const;  // jobs run with over_capacity() since start

 private:
  void worker();
  void reap();  // joins the workers that exited; call without mu_

  const size_t max_open_;
  const double idle_exit_s_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  size_t open_ = 0;
  size_t waiting_ = 0;  // workers blocked for a job
  size_t rejected_ = 0;
  bool stop_ = false;
  std::list<std::thread> threads_;
  std::vector<std::thread::id> exited_;  // workers that returned, to be joined
};

}  // namespace agentkv::server
