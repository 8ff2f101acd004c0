// Closes the sockets of connections the server has already answered (the 503
// past the connection cap) once the client has stopped sending.
//
// Closing a socket that still has unread input, or that receives more, makes
// the kernel reset the connection; a client still sending its request body
// then gets EPIPE or ECONNRESET and never reads the answer waiting for it.
// So an answered socket is shut down for writing (the client sees the end of
// the response) and handed here, where one thread reads and discards what
// arrives until the client closes too, or a grace period ends.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace agentkv::server {

class LingeringCloser {
 public:
  // At most `max_sockets` wait at once (more are closed at once); each waits
  // at most `grace_s`.
  explicit LingeringCloser(size_t max_sockets = 1024, double grace_s = 2.0);
  ~LingeringCloser();  // closes every socket still waiting
  LingeringCloser(const LingeringCloser&) = delete;
  LingeringCloser& operator=(const LingeringCloser&) = delete;

  // Takes `sock` (already answered and shut down for writing). Never blocks.
  void close_later(int sock);

 private:
  using Clock = std::chrono::steady_clock;
  void run();

  const size_t max_sockets_;
  const Clock::duration grace_;
  int wake_fd_ = -1;  // eventfd: a new socket, or stop
  std::mutex mu_;
  std::vector<std::pair<int, Clock::time_point>> incoming_;  // guarded by mu_
  std::atomic<size_t> waiting_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace agentkv::server
