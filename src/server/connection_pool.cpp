#include "server/connection_pool.h"

#include <chrono>
#include <system_error>

namespace agentkv::server {
namespace {
thread_local bool t_over_capacity = false;
}  // namespace

ConnectionPool::ConnectionPool(size_t max_open, double idle_exit_s)
    : max_open_(max_open < 1 ? 1 : max_open), idle_exit_s_(idle_exit_s) {}

// Qualified: a virtual call in a destructor would not dispatch anyway.
ConnectionPool::~ConnectionPool() { ConnectionPool::shutdown(); }

bool ConnectionPool::over_capacity() { return t_over_capacity; }

void ConnectionPool::enqueue(std::function<void()> fn) {
  reap();
  bool reject = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stop_ || open_ >= max_open_) {
      reject = true;
      ++rejected_;
    } else {
      ++open_;
      jobs_.push_back(std::move(fn));
      if (waiting_ < jobs_.size()) {
        // No idle worker is left for this job: start one. A thread that
        // cannot start turns the connection away like the cap does.
        try {
          threads_.emplace_back([this] { worker(); });
        } catch (const std::system_error&) {
          fn = std::move(jobs_.back());
          jobs_.pop_back();
          --open_;
          ++rejected_;
          reject = true;
        }
      } else {
        cv_.notify_one();
      }
    }
  }
  if (reject) {
    t_over_capacity = true;
    fn();
    t_over_capacity = false;
  }
}

void ConnectionPool::worker() {
  const auto idle = std::chrono::duration<double>(idle_exit_s_);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++waiting_;
    const bool got = cv_.wait_for(lock, idle, [&] { return !jobs_.empty() || stop_; });
    --waiting_;
    if (!got || jobs_.empty()) break;  // idle too long, or stopping with nothing queued
    std::function<void()> fn = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    fn();
    fn = nullptr;  // the job's captures go before the count does
    lock.lock();
    --open_;
  }
  if (!stop_) exited_.push_back(std::this_thread::get_id());
}

void ConnectionPool::reap() {
  std::list<std::thread> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::thread::id id : exited_) {
      for (auto it = threads_.begin(); it != threads_.end(); ++it) {
        if (it->get_id() == id) {
          done.splice(done.end(), threads_, it);
          break;
        }
      }
    }
    exited_.clear();
  }
  for (std::thread& t : done) t.join();  // each has returned or is returning
}

void ConnectionPool::shutdown() {
  std::list<std::thread> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    all.swap(threads_);
    exited_.clear();
  }
  cv_.notify_all();
  for (std::thread& t : all) t.join();
}

size_t ConnectionPool::open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}

size_t ConnectionPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_.size();
}

size_t ConnectionPool::rejected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rejected_;
}

}  // namespace agentkv::server
