#include "server/connection_stream.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace agentkv::server {
namespace {

using Clock = ConnectionStream::Clock;

Clock::time_point after(Clock::time_point t, double seconds) {
  return t +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(0.0, seconds)));
}

void ip_and_port(const sockaddr_storage& addr, socklen_t len, std::string& ip, int& port) {
  if (addr.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  } else {
    return;
  }
  char host[NI_MAXHOST] = {};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), nullptr, 0,
                  NI_NUMERICHOST) == 0) {
    ip = host;
  }
}

constexpr size_t kReadBuffer = 16 * 1024;

}  // namespace

ConnectionStream::ConnectionStream(int sock, int wake_fd, const ConnectionTimeouts& t)
    : sock_(sock), wake_fd_(wake_fd), t_(t), accepted_(Clock::now()), buf_(kReadBuffer) {}

bool ConnectionStream::poll_until(short events, Clock::time_point deadline) const {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd fds[2] = {{sock_, events, 0}, {wake_fd_, POLLIN, 0}};
    const int n = ::poll(fds, wake_fd_ >= 0 ? 2 : 1, static_cast<int>(std::min<long long>(left, 60'000)));
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) continue;  // re-check the clock (poll may wake early)
    if (wake_fd_ >= 0 && (fds[1].revents & POLLIN)) return false;
    // POLLHUP/POLLERR count as ready: the read or write that follows reports them.
    if (fds[0].revents) return true;
  }
}

bool ConnectionStream::wait_request(bool first) {
  phase_ = Phase::kHeaders;
  header_bytes_ = 0;
  line_len_ = 0;
  if (off_ == len_) {
    const Clock::time_point wait_end =
        first ? after(accepted_, t_.header_s) : after(Clock::now(), t_.keep_alive_s);
    if (!poll_until(POLLIN, wait_end)) return false;
    // The peer may have closed: the read reports it (httplib then closes too).
  }
  deadline_ = first ? after(accepted_, t_.header_s) : after(Clock::now(), t_.header_s);
  return true;
}

bool ConnectionStream::fill() {
  if (!poll_until(POLLIN, deadline_)) return false;
  for (;;) {
    const ssize_t n = ::recv(sock_, buf_.data(), buf_.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off_ = 0;
    len_ = static_cast<size_t>(n);
    return true;
  }
}

bool ConnectionStream::account_headers(const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (++header_bytes_ > t_.max_header_bytes) return false;
    const char c = p[i];
    if (c == '\n') {
      if (line_len_ == 0 && header_bytes_ > 2) {
        // The blank line: the body, if any, has its own deadline from here.
        phase_ = Phase::kBody;
        deadline_ = after(Clock::now(), t_.body_s);
        return true;
      }
      line_len_ = 0;
    } else if (c != '\r') {
      ++line_len_;
    }
  }
  return true;
}

bool ConnectionStream::is_readable() const { return off_ < len_ || poll_until(POLLIN, deadline_); }

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (size == 0) return 0;
  if (off_ == len_ && !fill()) return -1;
  size_t n = std::min(size, len_ - off_);
  if (phase_ == Phase::kHeaders) {
    // httplib reads headers byte by byte; stop at the blank line so the body
    // phase starts exactly there.
    n = 1;
    if (!account_headers(buf_.data() + off_, n)) return -1;
  }
  std::memcpy(ptr, buf_.data() + off_, n);
  off_ += n;
  return static_cast<ssize_t>(n);
}

bool ConnectionStream::is_writable() const {
  if (!poll_until(POLLOUT, after(Clock::now(), t_.write_s))) return false;
  // As httplib's is_socket_alive(): a readable socket with nothing to peek
  // at is closed by the peer, so a stream to a client that left stops.
  pollfd in = {sock_, POLLIN, 0};
  if (::poll(&in, 1, 0) <= 0) return true;
  char c;
  return ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  if (!poll_until(POLLOUT, after(Clock::now(), t_.write_s))) return -1;
  for (;;) {
    const ssize_t n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    return n;
  }
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip_and_port(addr, len, ip, port);
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip_and_port(addr, len, ip, port);
}

}  // namespace agentkv::server
