#include "cluster/redis_kv_tier.h"

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdio>
#include <regex>

namespace agentkv::cluster {

struct RedisKvTier::Conn {
  redisContext* ctx = nullptr;
  std::chrono::steady_clock::time_point retry_at{};
  ~Conn() {
    if (ctx) redisFree(ctx);
  }
};

Result<std::unique_ptr<RedisKvTier>> RedisKvTier::start(const RedisKvTierOptions& opts) {
  static const std::regex re(R"(redis://([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]):([0-9]{1,5})(/([0-9]{1,2}))?)");
  std::smatch m;
  if (!std::regex_match(opts.url, m, re)) {
    return make_error(ErrorCode::kInvalidArgument, "--kv-remote '", opts.url, "' is not redis://HOST:PORT[/DB]");
  }
  std::unique_ptr<RedisKvTier> t(new RedisKvTier());
  t->opts_ = opts;
  t->host_ = m[1].str();
  if (t->host_.front() == '[') t->host_ = t->host_.substr(1, t->host_.size() - 2);
  t->port_ = std::stoi(m[2].str());
  t->db_ = m[4].matched ? std::stoi(m[4].str()) : 0;
  if (t->port_ < 1 || t->port_ > 65535) return make_error(ErrorCode::kInvalidArgument, "--kv-remote: bad port");
  if (opts.ttl_s < 1) return make_error(ErrorCode::kInvalidArgument, "--kv-remote-ttl-s must be >= 1");
  t->endpoint_ = opts.url;
  t->writer_ = std::thread([p = t.get()] { p->run_writer(); });
  t->reader_ = std::thread([p = t.get()] { p->run_reader(); });
  return t;
}

RedisKvTier::~RedisKvTier() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  write_cv_.notify_all();
  read_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
}

void RedisKvTier::put(std::string key, std::string value) {
  queue({std::move(key), std::move(value), false});
}

void RedisKvTier::put_ref(std::string key, std::string value) {
  queue({std::move(key), std::move(value), true});
}

void RedisKvTier::queue(Write w) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (write_bytes_queued_ + w.value.size() <= opts_.max_write_bytes) {
      write_bytes_queued_ += w.value.size();
      writes_.push_back(std::move(w));
      write_cv_.notify_one();
      return;
    }
  }
  ++writes_dropped_;
}

void RedisKvTier::get(uint64_t ticket, std::vector<std::string> keys) {
  std::lock_guard<std::mutex> lk(mu_);
  reads_.emplace_back(ticket, std::move(keys));
  read_cv_.notify_one();
}

std::vector<KvRemoteTier::Answer> RedisKvTier::poll() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<Answer> out;
  out.swap(answers_);
  return out;
}

void RedisKvTier::set_notify(std::function<void()> fn) {
  std::lock_guard<std::mutex> lk(mu_);
  notify_ = std::move(fn);
}

RedisKvTierStats RedisKvTier::stats() const {
  RedisKvTierStats s;
  s.written = written_;
  s.refs_written = refs_written_;
  s.write_bytes = write_bytes_;
  s.writes_dropped = writes_dropped_;
  s.found = found_;
  s.missing = missing_;
  s.read_bytes = read_bytes_;
  s.errors = errors_;
  s.up = up_;
  return s;
}

void RedisKvTier::failed(Conn& c, const char* what) {
  ++errors_;
  const std::string why = c.ctx && c.ctx->errstr[0] ? c.ctx->errstr : what;
  if (c.ctx) redisFree(c.ctx);
  c.ctx = nullptr;
  c.retry_at = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  // Once per outage, whichever connection finds it first.
  const bool was_up = up_.exchange(false);
  const bool warned = warned_.exchange(true);
  if (was_up || !warned) {
    std::fprintf(stderr, "agentkv: kv-remote %s is unavailable (%s): serving from recompute until it is back\n",
                 endpoint_.c_str(), why.c_str());
  }
}

bool RedisKvTier::connect(Conn& c) {
  if (c.ctx) return true;
  if (std::chrono::steady_clock::now() < c.retry_at) return false;
  const auto us = static_cast<long>(opts_.timeout_s * 1e6);
  const timeval tv{us / 1000000, us % 1000000};
  c.ctx = redisConnectWithTimeout(host_.c_str(), port_, tv);
  if (c.ctx == nullptr || c.ctx->err) {
    failed(c, "cannot connect");
    return false;
  }
  redisSetTimeout(c.ctx, tv);
  if (db_ != 0) {
    auto* r = static_cast<redisReply*>(redisCommand(c.ctx, "SELECT %d", db_));
    const bool ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    if (!ok) {
      failed(c, "SELECT failed");
      return false;
    }
  }
  if (!up_.exchange(true) && warned_.load()) {
    std::fprintf(stderr, "agentkv: kv-remote %s is back\n", endpoint_.c_str());
  }
  return true;
}

void RedisKvTier::run_writer() {
  Conn c;
  for (;;) {
    std::vector<Write> batch;
    {
      std::unique_lock<std::mutex> lk(mu_);
      write_cv_.wait(lk, [&] { return stop_ || !writes_.empty(); });
      if (stop_) return;
      while (!writes_.empty() && batch.size() < 64) {
        write_bytes_queued_ -= writes_.front().value.size();
        batch.push_back(std::move(writes_.front()));
        writes_.pop_front();
      }
    }
    if (!connect(c)) {
      writes_dropped_ += batch.size();
      continue;
    }
    for (const Write& w : batch) {
      redisAppendCommand(c.ctx, "SET %b %b EX %d", w.key.data(), w.key.size(), w.value.data(), w.value.size(),
                         opts_.ttl_s);
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      void* rp = nullptr;
      if (redisGetReply(c.ctx, &rp) != REDIS_OK) {
        failed(c, "write failed");
        writes_dropped_ += batch.size() - i;
        break;
      }
      auto* r = static_cast<redisReply*>(rp);
      if (r->type == REDIS_REPLY_ERROR) {  // full (maxmemory with noeviction), or refused
        ++errors_;
        ++writes_dropped_;
      } else {
        ++(batch[i].ref ? refs_written_ : written_);
        write_bytes_ += batch[i].value.size();
      }
      freeReplyObject(r);
    }
  }
}

void RedisKvTier::run_reader() {
  Conn c;
  for (;;) {
    std::pair<uint64_t, std::vector<std::string>> req;
    {
      std::unique_lock<std::mutex> lk(mu_);
      read_cv_.wait(lk, [&] { return stop_ || !reads_.empty(); });
      if (stop_) return;
      req = std::move(reads_.front());
      reads_.pop_front();
    }
    Answer a;
    a.ticket = req.first;
    a.values.resize(req.second.size());
    if (!req.second.empty() && connect(c)) {
      std::vector<const char*> argv{"MGET"};
      std::vector<size_t> lens{4};
      for (const std::string& k : req.second) {
        argv.push_back(k.data());
        lens.push_back(k.size());
      }
      auto* r = static_cast<redisReply*>(
          redisCommandArgv(c.ctx, static_cast<int>(argv.size()), argv.data(), lens.data()));
      if (r == nullptr) {
        failed(c, "read failed");
      } else {
        if (r->type == REDIS_REPLY_ARRAY && r->elements == req.second.size()) {
          for (size_t i = 0; i < r->elements; ++i) {
            const redisReply* e = r->element[i];
            if (e->type == REDIS_REPLY_STRING) {
              a.values[i] = std::string(e->str, e->len);
              ++found_;
              read_bytes_ += e->len;
            } else {
              ++missing_;
            }
          }
        } else {
          ++errors_;
        }
        freeReplyObject(r);
      }
    }
    std::function<void()> notify;
    {
      std::lock_guard<std::mutex> lk(mu_);
      answers_.push_back(std::move(a));
      notify = notify_;
    }
    if (notify) notify();
  }
}

}  // namespace agentkv::cluster
