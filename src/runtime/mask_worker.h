// One background thread that runs a job while the engine thread runs the
// forward pass: the grammar masks of a step's sampled rows are computed in
// the shadow of the step (as vLLM and SGLang overlap them), not after it.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace agentkv {

class MaskWorker {
 public:
  MaskWorker();
  ~MaskWorker();
  MaskWorker(const MaskWorker&) = delete;
  MaskWorker& operator=(const MaskWorker&) = delete;

  // Starts `job` on the worker. At most one job at a time: call wait() before
  // the next start().
  void start(std::function<void()> job);
  // Blocks until the started job (if any) has finished.
  void wait();

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace agentkv
