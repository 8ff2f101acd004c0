// The wire format (decoded here with msgpack-cxx; tests/python/
// test_kv_events.py decodes it with vLLM's own classes) and the publisher's
// PUB and replay sockets, over ipc:// on this machine.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <msgpack.hpp>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "cluster/kv_event_codec.h"
#include "cluster/kv_event_publisher.h"

namespace agentkv::cluster {
namespace {

KvEventBatch sample_batch() {
  KvEventBatch b;
  b.ts = 1700000000.5;
  KvBlockStored s;
  s.block_hashes = {1, 0xfedcba9876543210ull};
  s.parent_block_hash = std::nullopt;
  s.token_ids = {1, 2, 3, 4, 5, 6, 7, 8};
  s.block_size = 4;
  s.lora_name = "alora-a";
  s.medium = "CPU";
  s.extra_keys = {{"alora-a", "tenant:t"}, {}};
  b.events.emplace_back(s);
  b.events.emplace_back(KvBlockRemoved{{7, 8}, "CPU"});
  b.events.emplace_back(KvAllBlocksCleared{});
  return b;
}

std::map<std::string, msgpack::object> as_map(const msgpack::object& o) {
  std::map<std::string, msgpack::object> m;
  EXPECT_EQ(o.type, msgpack::type::MAP);
  for (uint32_t i = 0; i < o.via.map.size; ++i) m[o.via.map.ptr[i].key.as<std::string>()] = o.via.map.ptr[i].val;
  return m;
}

TEST(KvEventCodec, BatchIsAnArrayOfTsEventsRank) {
  const std::string bytes = encode_kv_event_batch(sample_batch(), 3);
  msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size());
  const msgpack::object& o = h.get();
  ASSERT_EQ(o.type, msgpack::type::ARRAY);
  ASSERT_EQ(o.via.array.size, 3u);
  EXPECT_EQ(o.via.array.ptr[0].type, msgpack::type::FLOAT64);
  EXPECT_EQ(o.via.array.ptr[0].as<double>(), 1700000000.5);
  EXPECT_EQ(o.via.array.ptr[2].as<int>(), 3);
  const msgpack::object& ev = o.via.array.ptr[1];
  ASSERT_EQ(ev.via.array.size, 3u);
  auto stored = as_map(ev.via.array.ptr[0]);
  EXPECT_EQ(stored["type"].as<std::string>(), "BlockStored");
  EXPECT_EQ(stored["block_hashes"].as<std::vector<uint64_t>>(), (std::vector<uint64_t>{1, 0xfedcba9876543210ull}));
  EXPECT_TRUE(stored["parent_block_hash"].is_nil());
  EXPECT_EQ(stored["token_ids"].as<std::vector<int>>().size(), 8u);
  EXPECT_EQ(stored["block_size"].as<int>(), 4);
  EXPECT_TRUE(stored["lora_id"].is_nil());
  EXPECT_EQ(stored["medium"].as<std::string>(), "CPU");
  EXPECT_EQ(stored["lora_name"].as<std::string>(), "alora-a");
  const msgpack::object& ek = stored["extra_keys"];
  ASSERT_EQ(ek.via.array.size, 2u);
  EXPECT_EQ(ek.via.array.ptr[0].as<std::vector<std::string>>(), (std::vector<std::string>{"alora-a", "tenant:t"}));
  EXPECT_TRUE(ek.via.array.ptr[1].is_nil());
  auto removed = as_map(ev.via.array.ptr[1]);
  EXPECT_EQ(removed.size(), 3u);
  EXPECT_EQ(removed["type"].as<std::string>(), "BlockRemoved");
  EXPECT_EQ(removed["block_hashes"].as<std::vector<uint64_t>>(), (std::vector<uint64_t>{7, 8}));
  auto cleared = as_map(ev.via.array.ptr[2]);
  EXPECT_EQ(cleared.size(), 1u);
  EXPECT_EQ(cleared["type"].as<std::string>(), "AllBlocksCleared");
}

int64_t be64(const zmq::message_t& m) {
  EXPECT_EQ(m.size(), 8u);
  int64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | static_cast<const uint8_t*>(m.data())[i];
  return v;
}

std::vector<zmq::message_t> recv_all(zmq::socket_t& s) {
  std::vector<zmq::message_t> out;
  for (;;) {
    zmq::message_t m;
    if (!s.recv(m)) break;
    const bool more = m.more();
    out.push_back(std::move(m));
    if (!more) break;
  }
  return out;
}

KvEventBatch small_batch() {
  KvEventBatch b;
  b.ts = 1.0;
  b.events.emplace_back(KvBlockRemoved{{42}, "CPU"});
  return b;
}

// A SUB socket on the publisher, and the sequence number of the newest batch
// once the subscription is in place (PUB drops what it sends before).
int64_t subscribe(KvEventPublisher& p, zmq::socket_t& sub, const std::string& endpoint) {
  sub.set(zmq::sockopt::subscribe, "");
  sub.set(zmq::sockopt::rcvtimeo, 200);
  sub.connect(endpoint);
  int64_t last = -1;
  for (int i = 0; i < 50 && last < 0; ++i) {
    p.publish(small_batch());
    auto f = recv_all(sub);
    if (!f.empty()) last = be64(f[1]);
  }
  EXPECT_GE(last, 0) << "no subscription in 10 s";
  // Batches of earlier rounds may still be on their way.
  for (auto f = recv_all(sub); !f.empty(); f = recv_all(sub)) last = be64(f[1]);
  sub.set(zmq::sockopt::rcvtimeo, 5000);
  return last;
}

TEST(KvEventPublisher, SendsNumberedBatchesAndReplaysThem) {
  const std::string dir = "/tmp/agentkv-kvev-" + std::to_string(::getpid());
  KvEventPublisherOptions o;
  o.endpoint = "ipc://" + dir + "-pub";
  o.replay_endpoint = "ipc://" + dir + "-replay";
  o.topic = "kv";
  o.buffer_steps = 3;
  auto p = KvEventPublisher::start(o);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  const int64_t s0 = subscribe(**p, sub, o.endpoint);
  for (int i = 0; i < 4; ++i) (*p)->publish(sample_batch());
  for (int i = 0; i < 4; ++i) {
    auto f = recv_all(sub);
    ASSERT_EQ(f.size(), 3u);
    EXPECT_EQ(f[0].to_string(), "kv");
    EXPECT_EQ(be64(f[1]), s0 + 1 + i);  // consecutive
    EXPECT_EQ(f[2].to_string(), encode_kv_event_batch(sample_batch(), 0));
  }
  const int64_t last = s0 + 4;
  // Replay from 0: only the newest three are still buffered.
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::rcvtimeo, 5000);
  dealer.connect(o.replay_endpoint);
  auto replay = [&](const std::string& start) {
    dealer.send(zmq::buffer(std::string()), zmq::send_flags::sndmore);
    dealer.send(zmq::buffer(start), zmq::send_flags::none);
    std::vector<int64_t> seqs;
    for (;;) {
      auto f = recv_all(dealer);
      EXPECT_EQ(f.size(), 4u);  // "", topic, seq, payload
      if (f.size() != 4) break;
      const int64_t seq = be64(f[2]);
      if (seq == -1) {
        EXPECT_EQ(f[3].size(), 0u);
        break;
      }
      EXPECT_EQ(f[1].to_string(), "kv");
      EXPECT_EQ(f[3].to_string(), encode_kv_event_batch(sample_batch(), 0));
      seqs.push_back(seq);
    }
    return seqs;
  };
  EXPECT_EQ(replay(std::string(8, '\0')), (std::vector<int64_t>{last - 2, last - 1, last}));
  // A start of another length is read unsigned, as vLLM reads it.
  EXPECT_EQ(replay(std::string(1, static_cast<char>(last))), (std::vector<int64_t>{last}));
  EXPECT_TRUE(replay(std::string(9, '\xff')).empty());  // past every batch: only the end marker
  EXPECT_EQ((*p)->n_dropped(), 0u);
}

TEST(KvEventPublisher, PastTheEventCapABatchIsDroppedWithAGap) {
  KvEventPublisherOptions o;
  o.endpoint = "ipc:///tmp/agentkv-kvev-cap-" + std::to_string(::getpid());
  o.max_events = 2;  // a batch of three events never fits: dropped
  auto p = KvEventPublisher::start(o);
  ASSERT_TRUE(p.is_ok());
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  const int64_t s0 = subscribe(**p, sub, o.endpoint);
  (*p)->publish(sample_batch());  // dropped: its number is skipped
  (*p)->publish(small_batch());
  auto f = recv_all(sub);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(be64(f[1]), s0 + 2);
  EXPECT_EQ((*p)->n_dropped(), 1u);
  EXPECT_EQ((*p)->n_events_dropped(), 3u);
}

TEST(KvEventPublisher, AFullQueueMergesWithoutLoss) {
  KvEventPublisherOptions o;
  o.endpoint = "ipc:///tmp/agentkv-kvev-merge-" + std::to_string(::getpid());
  o.max_queue = 1;  // past one waiting batch, batches merge
  auto p = KvEventPublisher::start(o);
  ASSERT_TRUE(p.is_ok());
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  subscribe(**p, sub, o.endpoint);
  // 50 one-event batches arrive as 50 events, in at most 50 messages.
  for (int i = 0; i < 50; ++i) (*p)->publish(small_batch());
  (*p)->flush(5.0);
  size_t events = 0;
  sub.set(zmq::sockopt::rcvtimeo, 500);
  for (auto g = recv_all(sub); !g.empty(); g = recv_all(sub)) {
    msgpack::object_handle h = msgpack::unpack(static_cast<const char*>(g[2].data()), g[2].size());
    events += h.get().via.array.ptr[1].via.array.size;
  }
  EXPECT_EQ(events, 50u);
  EXPECT_EQ((*p)->n_dropped(), 0u);
}

TEST(KvEventPublisher, BadEndpointsAreClearErrors) {
  KvEventPublisherOptions o;
  o.endpoint = "127.0.0.1:5557";
  auto p = KvEventPublisher::start(o);
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("tcp://HOST:PORT"), std::string::npos);
  o.endpoint = "tcp://*:notaport";
  p = KvEventPublisher::start(o);
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("--kv-events"), std::string::npos);
}

// A connect endpoint (no '*'): the publisher connects to a subscriber that
// binds, as a central router's does.
TEST(KvEventPublisher, ConnectsToASubscriberThatBinds) {
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "");
  sub.set(zmq::sockopt::rcvtimeo, 300);
  sub.bind("tcp://127.0.0.1:*");
  KvEventPublisherOptions o;
  o.endpoint = sub.get(zmq::sockopt::last_endpoint);
  auto p = KvEventPublisher::start(o);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ((*p)->endpoint(), o.endpoint);
  std::vector<zmq::message_t> first;
  for (int i = 0; i < 20 && first.empty(); ++i) {
    (*p)->publish(sample_batch());
    first = recv_all(sub);
  }
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[2].to_string(), encode_kv_event_batch(sample_batch(), 0));
}

}  // namespace
}  // namespace agentkv::cluster
