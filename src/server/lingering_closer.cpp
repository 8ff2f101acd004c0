#include "server/lingering_closer.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

namespace agentkv::server {
namespace {

// Reads what `sock` has; true while the client may still send more.
bool discard_input(int sock) {
  char sink[16 * 1024];
  for (;;) {
    const ssize_t n = ::recv(sock, sink, sizeof(sink), MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

}  // namespace

LingeringCloser::LingeringCloser(size_t max_sockets, double grace_s)
    : max_sockets_(max_sockets),
      grace_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s))),
      wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      thread_([this] { run(); }) {}

LingeringCloser::~LingeringCloser() {
  stop_ = true;
  const uint64_t one = 1;
  if (wake_fd_ >= 0) {
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  }
  thread_.join();
  for (const auto& [sock, deadline] : incoming_) ::close(sock);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void LingeringCloser::close_later(int sock) {
  if (wake_fd_ < 0 || stop_ || waiting_.load() >= max_sockets_) {
    ::close(sock);
    return;
  }
  ++waiting_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.emplace_back(sock, Clock::now() + grace_);
  }
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void LingeringCloser::run() {
  std::vector<std::pair<int, Clock::time_point>> socks;
  std::vector<pollfd> fds;
  while (!stop_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      socks.insert(socks.end(), incoming_.begin(), incoming_.end());
      incoming_.clear();
    }
    fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
    Clock::time_point next = Clock::now() + std::chrono::seconds(1);
    for (const auto& [sock, deadline] : socks) {
      fds.push_back(pollfd{sock, POLLIN, 0});
      next = std::min(next, deadline);
    }
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
    ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(0, wait)));
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &v, sizeof(v));
    }
    const Clock::time_point now = Clock::now();
    size_t kept = 0;
    for (size_t i = 0; i < socks.size(); ++i) {
      const bool more = fds[i + 1].revents == 0 || discard_input(socks[i].first);
      if (more && now < socks[i].second) {
        socks[kept++] = socks[i];
      } else {
        ::close(socks[i].first);
        --waiting_;
      }
    }
    socks.resize(kept);
  }
  for (const auto& [sock, deadline] : socks) ::close(sock);
}

}  // namespace agentkv::server
