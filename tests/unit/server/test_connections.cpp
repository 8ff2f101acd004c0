// The connection layer under the HTTP server (connection_server.h): the cap,
// the deadlines, and a stop that does not wait for idle connections.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "http_server_test_util.h"
#include "server/connection_pool.h"

namespace agentkv::server {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using test::HttpServerTest;

// A raw client socket connected to 127.0.0.1:port (-1 on failure).
int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Seconds until the server closes `fd` (reading and dropping what it sends);
// a read timeout of `limit_s` bounds the wait.
double seconds_until_closed(int fd, double limit_s) {
  timeval tv{static_cast<time_t>(limit_s), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const auto t0 = Clock::now();
  char buf[512];
  while (::recv(fd, buf, sizeof(buf), 0) > 0) {
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Sockets {
  std::vector<int> fds;
  ~Sockets() {
    for (int fd : fds) ::close(fd);
  }
};

TEST(ConnectionPool, RunsJobsOnThreadsAndTurnsAwayPastTheCap) {
  ConnectionPool pool(2, /*idle_exit_s=*/0.05);
  std::atomic<int> release{0}, ran{0}, over{0};
  auto blocking = [&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++ran;
  };
  pool.enqueue(blocking);
  pool.enqueue(blocking);
  EXPECT_EQ(pool.open(), 2u);
  // The third runs at once, here, marked over capacity.
  pool.enqueue([&] { over += ConnectionPool::over_capacity() ? 1 : 0; });
  EXPECT_EQ(over.load(), 1);
  EXPECT_FALSE(ConnectionPool::over_capacity());
  EXPECT_EQ(pool.rejected(), 1u);
  release = 1;
  while (pool.open() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(ran.load(), 2);
  // Idle workers exit; a new job starts a new one.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  pool.enqueue([&] { ++ran; });
  pool.shutdown();
  EXPECT_EQ(ran.load(), 3);
}

TEST_F(HttpServerTest, PastTheConnectionCapA503WithAnOpenAiError) {
  ServerConfig cfg;
  cfg.connections.max_connections = 3;
  start(cfg);
  Sockets held;
  for (int i = 0; i < 3; ++i) held.fds.push_back(connect_to(port_));
  int status = 0;
  std::string body, connection;
  for (int i = 0; i < 200 && status != 503; ++i) {  // until the server has accepted all three
    auto r = client().Get("/health");
    if (r) {
      status = r->status;
      body = r->body;
      connection = r->get_header_value("Connection");
    }
    if (status != 503) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(status, 503);
  EXPECT_EQ(connection, "close");
  const json e = json::parse(body)["error"];
  EXPECT_EQ(e["code"], "too_many_connections");
  EXPECT_EQ(e["type"], "server_error");
  for (int fd : held.fds) ::close(fd);
  held.fds.clear();
  bool ok = false;
  for (int i = 0; i < 200 && !ok; ++i) {
    auto again = client().Get("/health");
    ok = again && again->status == 200;
    if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(ok);
}

TEST_F(HttpServerTest, SlowClientsAreClosedAtTheirDeadlines) {
  ServerConfig cfg;
  cfg.connections.timeouts.header_s = 0.3;
  cfg.connections.timeouts.body_s = 0.3;
  cfg.connections.timeouts.keep_alive_s = 0.3;
  start(cfg);
  const int silent = connect_to(port_);
  const double t_silent = seconds_until_closed(silent, 5);
  ::close(silent);
  EXPECT_GT(t_silent, 0.2);
  EXPECT_LT(t_silent, 2.0);

  const int half = connect_to(port_);
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{";
  ASSERT_EQ(::send(half, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  const double t_body = seconds_until_closed(half, 5);
  ::close(half);
  EXPECT_LT(t_body, 2.0);

  // Headers that never end are cut at 64 KiB, whatever the deadline.
  const int big = connect_to(port_);
  std::string flood = "GET /health HTTP/1.1\r\n";
  while (flood.size() < 80 * 1024) flood += "X-Pad: " + std::string(100, 'a') + "\r\n";
  ::send(big, flood.data(), flood.size(), MSG_NOSIGNAL);
  EXPECT_LT(seconds_until_closed(big, 5), 2.0);
  ::close(big);
}

TEST_F(HttpServerTest, IdleConnectionsNeitherBlockRequestsNorTheStop) {
  start();
  Sockets idle;
  for (int i = 0; i < 200; ++i) idle.fds.push_back(connect_to(port_));
  const auto t0 = Clock::now();
  auto r = client().Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 1.0);
  // Their header deadline is 10 s away; the stop wakes them.
  const auto t1 = Clock::now();
  server_->shutdown();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t1).count(), 2.0);
}

}  // namespace
}  // namespace agentkv::server
