#include "runtime/mask_worker.h"

#include <utility>

namespace agentkv {

MaskWorker::MaskWorker() : thread_([this] { loop(); }) {}

MaskWorker::~MaskWorker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MaskWorker::start(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = std::move(job);
    busy_ = true;
  }
  cv_.notify_all();
}

void MaskWorker::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [this] { return !busy_; });
}

void MaskWorker::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [this] { return stop_ || (busy_ && job_); });
    if (stop_) return;
    std::function<void()> job = std::move(job_);
    job_ = nullptr;
    lk.unlock();
    job();
    lk.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace agentkv
