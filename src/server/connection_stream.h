// One accepted HTTP connection as the httplib::Stream that
// httplib::Server::process_request() reads a request from and writes the
// response to, with the deadlines a server facing hostile clients needs.
//
// cpp-httplib (0.11) only has a per-read timeout, so a client that sends one
// header byte every few seconds, or none at all, holds its connection (and
// the worker thread serving it) for as long as it likes, and it waits for the
// next keep-alive request by polling every 10 ms. This stream instead gives
// each request phase a total deadline:
//
//   waiting  the first request's bytes: until header_s after accept;
//            a keep-alive request's: keep_alive_s of idleness
//   headers  from the request's first byte to the blank line: header_s
//   body     from the blank line to the body's last byte: body_s
//
// and caps the header bytes (httplib grows its line buffer without a limit).
// A read past its deadline, or once `wake_fd` is readable (the server is
// stopping), fails, and httplib closes the connection. Waits are poll(2), so
// an idle connection costs no CPU. The read buffer lives as long as the
// connection, so pipelined requests are not lost between requests.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace agentkv::server {

struct ConnectionTimeouts {
  double header_s = 10;                 // request line + headers, counted from accept for the first request
  double body_s = 30;                   // the whole body, counted from the end of the headers
  double keep_alive_s = 5;              // idle wait for the next request on a kept-alive connection
  double write_s = 5;                   // one write may wait this long for the socket to drain
  size_t max_header_bytes = 64 * 1024;  // request line + headers
};

class ConnectionStream : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;

  // Borrows `sock` and `wake_fd` (-1: none); closes neither.
  ConnectionStream(int sock, int wake_fd, const ConnectionTimeouts& t);

  // Waits for the first byte of the next request (true), or gives up: the
  // waiting deadline passed, the peer closed, or the server is stopping.
  // `first`: the connection's first request (deadline: accept + header_s).
  bool wait_request(bool first);

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return sock_; }

 private:
  enum class Phase { kHeaders, kBody };

  // poll(2) on the socket (and wake_fd) for `events` until `deadline`: true
  // when the socket is ready; false on timeout, error or wake.
  bool poll_until(short events, Clock::time_point deadline) const;
  // Reads what the socket has into buf_ (waiting until the phase deadline).
  bool fill();
  // Tracks the header bytes handed to httplib: switches to the body phase at
  // the blank line; false past max_header_bytes.
  bool account_headers(const char* p, size_t n);

  int sock_;
  int wake_fd_;
  ConnectionTimeouts t_;
  Clock::time_point accepted_;
  Clock::time_point deadline_;
  Phase phase_ = Phase::kHeaders;
  size_t header_bytes_ = 0;
  size_t line_len_ = 0;  // bytes of the current header line, CR excluded
  std::vector<char> buf_;
  size_t off_ = 0, len_ = 0;  // unread bytes are buf_[off_, len_)
};

}  // namespace agentkv::server
