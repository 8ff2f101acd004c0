#include "cluster/kv_event_publisher.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "cluster/kv_event_codec.h"

namespace agentkv::cluster {
namespace {

std::string be64(int64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[7 - i] = static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
  return s;
}

bool is_bind_endpoint(const std::string& e) {
  return e.find('*') != std::string::npos || e.find("::") != std::string::npos || e.starts_with("ipc://") ||
         e.starts_with("inproc://");
}

Status check_endpoint(const std::string& flag, const std::string& e) {
  if (e.starts_with("tcp://") || e.starts_with("ipc://") || e.starts_with("inproc://")) return Status::ok();
  return make_error(ErrorCode::kInvalidArgument, flag, " '", e,
                    "' is not a ZeroMQ endpoint: use tcp://HOST:PORT (tcp://*:5557 binds every address)");
}

// Sends one multipart message without blocking; a send error is said once.
struct FrameSender {
  bool failed = false;
  bool operator()(zmq::socket_t& sock, const std::vector<std::string>& frames) {
    try {
      for (size_t i = 0; i < frames.size(); ++i) {
        const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                                                 : zmq::send_flags::dontwait;
        if (!sock.send(zmq::buffer(frames[i]), flags)) return false;
      }
      return true;
    } catch (const zmq::error_t& e) {
      if (!failed) std::fprintf(stderr, "agentkv: kv-events: send failed: %s (said once)\n", e.what());
      failed = true;
      return false;
    }
  }
};

// Answers one replay request (identity, "", start seq) on the ROUTER socket:
// every buffered batch from the start on, then the end marker (seq -1). A
// malformed request is ignored (said once).
void serve_replay(zmq::socket_t& replay, const std::deque<std::pair<int64_t, std::string>>& buffer,
                  const std::string& topic, FrameSender& send, bool* warned) {
  std::vector<zmq::message_t> req;
  for (;;) {
    zmq::message_t m;
    if (!replay.recv(m, zmq::recv_flags::dontwait)) break;
    const bool more = m.more();
    req.push_back(std::move(m));
    if (!more) break;
  }
  if (req.size() != 3) {
    if (!req.empty() && !*warned) {
      std::fprintf(stderr,
                   "agentkv: kv-events: ignored a replay request of %zu frames (want identity, \"\", seq)\n",
                   req.size());
      *warned = true;
    }
    return;
  }
  const std::string id = req[0].to_string();
  // Unsigned, of any length, as vLLM reads it; past int64: nothing to replay.
  int64_t start = 0;
  const auto* b = static_cast<const uint8_t*>(req[2].data());
  for (size_t i = 0; i < req[2].size() && start >= 0; ++i) {
    start = start > (INT64_MAX >> 8) ? -1 : (start << 8) | b[i];
  }
  if (start < 0) start = INT64_MAX;
  for (const auto& [seq, payload] : buffer) {
    if (seq >= start) send(replay, {id, "", topic, be64(seq), payload});
  }
  send(replay, {id, "", "", be64(-1), ""});
}

}  // namespace

struct KvEventPublisher::Impl {
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  std::unique_ptr<zmq::socket_t> replay;
  std::deque<std::pair<int64_t, std::string>> buffer;  // seq, payload
};

KvEventPublisher::KvEventPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::start(const KvEventPublisherOptions& opts) {
  AKV_RETURN_IF_ERROR(check_endpoint("--kv-events", opts.endpoint));
  if (!opts.replay_endpoint.empty()) AKV_RETURN_IF_ERROR(check_endpoint("--kv-events-replay", opts.replay_endpoint));
  auto impl = std::make_unique<Impl>();
  std::string bound, replay_bound;
  try {
    impl->pub.set(zmq::sockopt::sndhwm, opts.hwm);
    impl->pub.set(zmq::sockopt::linger, 1000);
    if (is_bind_endpoint(opts.endpoint)) {
      impl->pub.bind(opts.endpoint);
      bound = impl->pub.get(zmq::sockopt::last_endpoint);
    } else {
      impl->pub.connect(opts.endpoint);
      bound = opts.endpoint;
    }
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::kInvalidArgument, "--kv-events ", opts.endpoint, ": ", e.what());
  }
  if (!opts.replay_endpoint.empty()) {
    try {
      impl->replay = std::make_unique<zmq::socket_t>(impl->ctx, zmq::socket_type::router);
      // A full replay and its end marker fit (vLLM's 2 x (buffer + 1)).
      impl->replay->set(zmq::sockopt::sndhwm, static_cast<int>(2 * (opts.buffer_steps + 1)));
      impl->replay->set(zmq::sockopt::linger, 0);
      impl->replay->bind(opts.replay_endpoint);
      replay_bound = impl->replay->get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return make_error(ErrorCode::kInvalidArgument, "--kv-events-replay ", opts.replay_endpoint, ": ", e.what());
    }
  }
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(std::move(impl)));
  p->opts_ = opts;
  p->endpoint_ = bound;
  p->replay_endpoint_ = replay_bound;
  p->thread_ = std::thread([q = p.get()] { q->run(); });
  return p;
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void KvEventPublisher::publish(KvEventBatch&& batch) {
  const size_t n = batch.events.size();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!stop_ && queued_events_ + n <= opts_.max_events) {
      queued_events_ += n;
      if (queue_.size() >= opts_.max_queue && !queue_.empty()) {
        KvEventBatch& last = queue_.back().batch;
        last.ts = batch.ts;
        for (KvEvent& e : batch.events) last.events.push_back(std::move(e));
      } else {
        queue_.push_back({next_seq_++, std::move(batch)});
      }
      cv_.notify_one();
      return;
    }
    ++next_seq_;  // the gap a subscriber sees
  }
  ++dropped_;
  events_dropped_ += n;
}

void KvEventPublisher::flush(double timeout_s) {
  std::unique_lock<std::mutex> lk(mu_);
  const int64_t last = next_seq_ - 1;
  sent_cv_.wait_for(lk, std::chrono::duration<double>(timeout_s), [&] { return sent_seq_ >= last; });
}

void KvEventPublisher::run() {
  Impl& s = *impl_;
  const std::string topic = opts_.topic;
  FrameSender send;
  bool warned = false;
  for (;;) {
    std::deque<Queued> todo;
    bool stopping = false;
    int64_t last_seq = -1;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait_for(lk, std::chrono::milliseconds(s.replay ? 20 : 200), [&] { return stop_ || !queue_.empty(); });
      todo.swap(queue_);
      queued_events_ = 0;
      stopping = stop_;
      last_seq = next_seq_ - 1;
    }
    if (s.replay) {
      zmq::pollitem_t item{static_cast<void*>(*s.replay), 0, ZMQ_POLLIN, 0};
      try {
        while (zmq::poll(&item, 1, std::chrono::milliseconds(0)) > 0 && (item.revents & ZMQ_POLLIN)) {
          serve_replay(*s.replay, s.buffer, topic, send, &warned);
        }
      } catch (const zmq::error_t& e) {
        std::fprintf(stderr, "agentkv: kv-events: replay: %s\n", e.what());
      }
    }
    for (Queued& q : todo) {
      std::string payload = encode_kv_event_batch(q.batch, opts_.data_parallel_rank);
      send(s.pub, {topic, be64(q.seq), payload});  // at the HWM, PUB drops as vLLM's does
      ++published_;
      s.buffer.emplace_back(q.seq, std::move(payload));
      if (s.buffer.size() > opts_.buffer_steps) s.buffer.pop_front();
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      sent_seq_ = std::max(sent_seq_, last_seq);
    }
    sent_cv_.notify_all();
    if (stopping) break;
  }
}

}  // namespace agentkv::cluster
