// Publishes KV cache events as vLLM's ZmqEventPublisher does (vLLM 0.33.0),
// so that routers built for vLLM (llm-d's precise-prefix scorer, Dynamo's
// indexer, vLLM's production-stack router) read agentkv unchanged:
//   - a PUB socket sends each batch as three frames: topic, an 8-byte
//     big-endian sequence number (from 0), the msgpack batch
//     (kv_event_codec.h);
//   - an optional ROUTER socket replays the batches still buffered: a
//     request [identity, "", start_seq (8 bytes big-endian)] gets
//     [identity, "", topic, seq, payload] for each buffered seq >= start_seq,
//     then [identity, "", "", -1 (8 bytes), ""].
// The PUB endpoint is bound when it has '*' or '::' or is ipc:// or
// inproc://, and connected to otherwise (vLLM's rule); the replay endpoint is
// always bound.
//
// publish() never blocks the engine: batches wait in a queue for the
// publisher's thread. A batch that finds max_queue batches waiting joins the
// last of them (nothing is lost, fewer messages go out). Past max_events
// events waiting, a batch is dropped and counted, and its sequence number
// is skipped: a subscriber sees a gap that replay cannot fill, and must
// resynchronise (start over from the replica's next AllBlocksCleared, or
// drop what it knows of this replica).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agentkv/kv_events.h"
#include "util/status.h"

namespace agentkv::cluster {

struct KvEventPublisherOptions {
  std::string endpoint;         // e.g. tcp://*:5557 (bind) or tcp://router:5557 (connect)
  std::string replay_endpoint;  // "": no replay
  std::string topic;
  size_t max_queue = 10000;     // batches waiting for the thread; past it, batches merge
  size_t max_events = 1 << 20;  // events waiting; past it, batches are dropped
  size_t buffer_steps = 10000;  // batches kept for replay
  int hwm = 100000;             // the PUB socket's send high-water mark
  int32_t data_parallel_rank = 0;
};

class KvEventPublisher {
 public:
  // Opens the sockets and starts the thread. kInvalidArgument naming the
  // endpoint when it cannot be bound or connected.
  static Result<std::unique_ptr<KvEventPublisher>> start(const KvEventPublisherOptions& opts);
  // Sends what is queued (for at most a second), then closes the sockets.
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Any thread; never blocks on the network.
  void publish(KvEventBatch&& batch);
  // Waits until every batch published so far has been sent, for at most
  // timeout_s (a process about to exit without destructors calls this).
  void flush(double timeout_s);

  uint64_t n_published() const { return published_.load(); }  // batches sent
  uint64_t n_dropped() const { return dropped_.load(); }      // batches dropped, queue full
  uint64_t n_events_dropped() const { return events_dropped_.load(); }
  // The endpoints as bound (a tcp port 0 resolved to the port the OS gave).
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }

 private:
  struct Impl;
  explicit KvEventPublisher(std::unique_ptr<Impl> impl);
  void run();

  std::unique_ptr<Impl> impl_;  // the sockets: the thread's alone after start
  KvEventPublisherOptions opts_;
  std::string endpoint_, replay_endpoint_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Queued {
    int64_t seq = 0;
    KvEventBatch batch;
  };
  std::deque<Queued> queue_;
  size_t queued_events_ = 0;
  int64_t next_seq_ = 0;  // numbers are given at publish(), so a dropped batch leaves a gap
  int64_t sent_seq_ = -1; // the last sequence number sent (or skipped)
  std::condition_variable sent_cv_;
  bool stop_ = false;
  std::atomic<uint64_t> published_{0}, dropped_{0}, events_dropped_{0};
  std::thread thread_;
};

}  // namespace agentkv::cluster
