// httplib::Server with the connection handling a public server needs:
// connections capped (past the cap: an immediate 503 with OpenAI's error
// body, then close), each request phase under a deadline, no busy polling
// while a connection is idle, and a stop that wakes idle connections at once.
//
// How: httplib (0.11) accepts on its listener thread and hands each socket to
// new_task_queue()'s queue as "process_and_close_socket(sock)". That queue
// is a ConnectionPool (thread per connection, capped), and
// process_and_close_socket, a virtual of httplib::Server, is replaced here by
// a keep-alive loop over a ConnectionStream (connection_stream.h) that calls
// httplib's own process_request() for each request. Routing, parsing and the
// response writing stay httplib's.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstddef>
#include <string>

#include "server/connection_stream.h"
#include "server/lingering_closer.h"

namespace agentkv::server {

struct ConnectionLimits {
  size_t max_connections = 2048;  // open at once; past it, 503
  ConnectionTimeouts timeouts;
  size_t max_requests_per_connection = 100;  // keep-alive requests before the server closes
};

class ConnectionServer : public httplib::Server {
 public:
  explicit ConnectionServer(ConnectionLimits limits);
  ~ConnectionServer() override;
  ConnectionServer(const ConnectionServer&) = delete;
  ConnectionServer& operator=(const ConnectionServer&) = delete;

  // httplib listens with a backlog of 5; Linux lets listen() be called again
  // on the bound socket to widen it. Call after bind, before listening.
  void widen_backlog(int n);
  // Every connection waiting for a request, or reading one, gives up now.
  // Part of stopping: stop() alone leaves them to their deadlines.
  void wake_all();

  size_t open_connections() const { return open_.load(); }
  size_t rejected_connections() const { return rejected_.load(); }
  const ConnectionLimits& limits() const { return limits_; }

  // The bytes sent to a connection over the cap (status line to body).
  static std::string over_capacity_response(size_t max_connections);

 private:
  bool process_and_close_socket(socket_t sock) override;
  void reject(socket_t sock);

  ConnectionLimits limits_;
  int wake_fd_ = -1;  // eventfd; readable once wake_all() ran
  std::atomic<size_t> open_{0};
  std::atomic<size_t> rejected_{0};
  std::string reject_bytes_;
  LingeringCloser closer_;  // rejected sockets, closed once their client is done
};

}  // namespace agentkv::server
