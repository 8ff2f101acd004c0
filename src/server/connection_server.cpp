#include "server/connection_server.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "server/api_error.h"
#include "server/connection_pool.h"

namespace agentkv::server {

ConnectionServer::ConnectionServer(ConnectionLimits limits)
    : limits_(limits), reject_bytes_(over_capacity_response(limits.max_connections)) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);  // -1: stop falls back on the deadlines
  const size_t cap = limits_.max_connections;
  new_task_queue = [cap] { return new ConnectionPool(cap); };
}

ConnectionServer::~ConnectionServer() {
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void ConnectionServer::widen_backlog(int n) {
  const socket_t s = svr_sock_;
  if (s != INVALID_SOCKET) ::listen(s, n);
}

void ConnectionServer::wake_all() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

std::string ConnectionServer::over_capacity_response(size_t max_connections) {
  ApiError e;
  e.status = 503;
  e.type = "server_error";
  e.code = "too_many_connections";
  e.message = "The server has too many open connections (at most " + std::to_string(max_connections) +
              "); retry later";
  const std::string body = to_json(e).dump();
  return "HTTP/1.1 503 Service Unavailable\r\n"
         "Content-Type: application/json\r\n"
         "Content-Length: " +
         std::to_string(body.size()) +
         "\r\n"
         "Connection: close\r\n"
         "Retry-After: 1\r\n"
         "\r\n" +
         body;
}

void ConnectionServer::reject(socket_t sock) {
  // On the accepting thread: nothing here may block. Answer at once, end our
  // side, and let the closer wait for the client's (see lingering_closer.h).
  [[maybe_unused]] const ssize_t n =
      ::send(sock, reject_bytes_.data(), reject_bytes_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(sock, SHUT_WR);
  closer_.close_later(sock);
  rejected_.fetch_add(1);
}

bool ConnectionServer::process_and_close_socket(socket_t sock) {
  if (ConnectionPool::over_capacity()) {
    reject(sock);
    return false;
  }
  open_.fetch_add(1);
  ConnectionStream strm(sock, wake_fd_, limits_.timeouts);
  bool ret = false;
  const size_t max_requests =
      limits_.max_requests_per_connection < 1 ? 1 : limits_.max_requests_per_connection;
  for (size_t served = 0; served < max_requests && svr_sock_ != INVALID_SOCKET; ++served) {
    if (!strm.wait_request(served == 0)) break;
    bool connection_closed = false;
    const bool last = served + 1 == max_requests;
    ret = process_request(strm, last, connection_closed, nullptr);
    if (!ret || connection_closed) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  open_.fetch_sub(1);
  return ret;
}

}  // namespace agentkv::server
