// The remote KV tier on Redis (or Valkey), with Debian's hiredis: values are
// kv/remote_block.h's, written with SET .. EX ttl and read with MGET, each on
// its own thread and connection so the engine never waits on the network.
// Redis's own maxmemory policy caps its memory (docs/cluster.md).
//
// Down, slow or full: a failed call answers "no values" (the engine
// recomputes), is counted, and is said once in the log; the tier reconnects
// at most once a second and says when it is back.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agentkv/kv_remote.h"
#include "util/status.h"

namespace agentkv::cluster {

struct RedisKvTierOptions {
  std::string url;                       // redis://HOST:PORT[/DB]
  int ttl_s = 3600;                      // each value's expiry
  size_t max_write_bytes = size_t{256} << 20;  // values waiting to be written; past it, writes are dropped
  double timeout_s = 0.5;                // connect and per-command timeout
};

struct RedisKvTierStats {
  uint64_t written = 0, write_bytes = 0, writes_dropped = 0, refs_written = 0;
  uint64_t found = 0, missing = 0, read_bytes = 0;
  uint64_t errors = 0;
  bool up = false;
};

class RedisKvTier final : public KvRemoteTier {
 public:
  // Checks the URL and starts the threads; Redis need not be up yet.
  static Result<std::unique_ptr<RedisKvTier>> start(const RedisKvTierOptions& opts);
  ~RedisKvTier() override;

  void put(std::string key, std::string value) override;
  void put_ref(std::string key, std::string value) override;
  void get(uint64_t ticket, std::vector<std::string> keys) override;
  std::vector<Answer> poll() override;
  void set_notify(std::function<void()> fn) override;
  RedisKvTierStats stats() const;
  const std::string& endpoint() const { return endpoint_; }

 private:
  struct Conn;
  RedisKvTier() = default;
  void run_writer();
  void run_reader();
  // A connected context, or null (down: tried at most once a second).
  bool connect(Conn& c);
  void failed(Conn& c, const char* what);

  RedisKvTierOptions opts_;
  std::string host_, endpoint_;
  int port_ = 6379, db_ = 0;
  mutable std::mutex mu_;
  std::condition_variable write_cv_, read_cv_;
  struct Write {
    std::string key, value;
    bool ref = false;
  };
  void queue(Write w);
  std::deque<Write> writes_;
  size_t write_bytes_queued_ = 0;
  std::deque<std::pair<uint64_t, std::vector<std::string>>> reads_;
  std::vector<Answer> answers_;
  std::function<void()> notify_;
  bool stop_ = false;
  std::atomic<uint64_t> written_{0}, write_bytes_{0}, writes_dropped_{0}, refs_written_{0}, found_{0},
      missing_{0}, read_bytes_{0}, errors_{0};
  std::atomic<bool> up_{false}, warned_{false};
  std::thread writer_, reader_;
};

}  // namespace agentkv::cluster
