// A ServingEngine with no model for the HTTP server tests: one engine thread
// emits a fixed script of tokens, one per request per tick, through the real
// sink protocol (first event with timings, last with finish and counts).
// Adapters are an in-memory list with the interface's load/unload rules; the
// adapter "file" is judged by its path (see load_adapter).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../tokenizer/tokenizer_test_util.h"
#include "agentkv/serving.h"
#include "runtime/request_hooks.h"

namespace agentkv::test {

class FakeServingEngine : public ServingEngine {
 public:
  FakeServingEngine() : tok_(*Tokenizer::create(tiny_bpe_vocab())) {
    script_ = tok_.encode("hello world", false, false);
    thread_ = std::thread([this] { loop(); });
  }
  ~FakeServingEngine() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // Knobs, set before a request.
  std::optional<Status> submit_error;  // submit fails with it
  int tokens_per_request = 3;          // < 0: until cancelled
  std::chrono::milliseconds tick{2};
  int cached_tokens = 1;
  // ServeRequestHooks::return_logits: each sampling event carries n_vocab logits
  // that peak at its token; a request under a scheme named here gets them
  // moved a little (an approximate scheme's error, for the audit's tests).
  std::vector<std::string> approximate_schemes;

  // Per-model and per-scheme totals stats() reports (set with set_stats).
  void set_stats(std::map<std::string, AdapterStats> per_model, std::map<std::string, int64_t> cached_by_scheme,
                 std::map<std::string, int64_t> prompt_by_scheme) {
    std::lock_guard<std::mutex> l(mu_);
    per_model_ = std::move(per_model);
    cached_by_scheme_ = std::move(cached_by_scheme);
    prompt_by_scheme_ = std::move(prompt_by_scheme);
  }

  // Load rules: a taken name or a bad kind is kInvalidArgument; a path
  // containing "missing" is kNotFound, "unreadable" kIo, "garbage" kParse.
  // The kind defaults to "lora"; the id is a hash of the path, so two names
  // for one path share it.
  Status load_adapter(const std::string& name, const std::string& path, const std::string& kind) override {
    std::lock_guard<std::mutex> l(mu_);
    if (name.empty() || adapters_.count(name)) {
      return make_error(ErrorCode::kInvalidArgument, "adapter name '", name, "' is taken");
    }
    if (!kind.empty() && kind != "lora" && kind != "alora" && kind != "icarus") {
      return make_error(ErrorCode::kInvalidArgument, "bad kind ", kind);
    }
    if (path.find("missing") != std::string::npos) return make_error(ErrorCode::kNotFound, "no adapter at ", path);
    if (path.find("unreadable") != std::string::npos) return make_error(ErrorCode::kIo, "cannot open ", path);
    if (path.find("garbage") != std::string::npos) return make_error(ErrorCode::kParse, path, ": not an adapter");
    adapters_[name] = ServedModel{name, kind.empty() ? "lora" : kind,
                                  std::to_string(std::hash<std::string>{}(path)), 8, {}, {}};
    loads.push_back(name + "=" + path + ":" + kind);
    return Status::ok();
  }

  Status unload_adapter(const std::string& name) override {
    std::lock_guard<std::mutex> l(mu_);
    if (adapters_.erase(name) == 0) return make_error(ErrorCode::kNotFound, "no adapter named '", name, "'");
    return Status::ok();
  }

  std::vector<ServedModel> models() const override {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<ServedModel> out = {ServedModel{"", "base", "", 0, {}, {}}};
    for (const auto& [name, m] : adapters_) out.push_back(m);
    return out;
  }

  Result<ServeId> submit(ServeRequest req, ServeSink sink) override {
    std::lock_guard<std::mutex> l(mu_);
    if (submit_error) return *submit_error;
    if (draining_) return make_error(ErrorCode::kUnavailable, "draining");
    if (!req.adapter.empty() && !adapters_.count(req.adapter)) {
      return make_error(ErrorCode::kNotFound, "no adapter named '", req.adapter, "'");
    }
    const ServeId id = next_id_++;
    submitted.push_back(req);
    active_[id] = Active{std::move(req), std::move(sink), 0, false, tokens_per_request};
    cv_.notify_all();
    return id;
  }

  void cancel(ServeId id) override {
    std::lock_guard<std::mutex> l(mu_);
    cancelled.push_back(id);
    auto it = active_.find(id);
    if (it != active_.end()) it->second.cancel = true;
  }

  bool drain(double timeout_s) override {
    std::unique_lock<std::mutex> l(mu_);
    draining_ = true;
    const bool done =
        cv_.wait_for(l, std::chrono::duration<double>(timeout_s), [&] { return active_.empty(); });
    for (auto& [id, a] : active_) a.cancel = true;
    cv_.wait(l, [&] { return active_.empty(); });
    return done;
  }

  // Frozen segments: an in-memory list with the interface's rules (a
  // segment under 4 tokens stands for "shorter than a block").
  std::optional<Status> segment_error;  // create_segment fails with it
  Result<SegmentInfo> create_segment(const SegmentSpec& spec) override {
    std::lock_guard<std::mutex> l(mu_);
    if (segment_error) return *segment_error;
    if (spec.tokens.empty()) return make_error(ErrorCode::kInvalidArgument, "the segment is empty");
    if (spec.tokens.size() < 4) return make_error(ErrorCode::kInvalidArgument, "shorter than a block");
    if (spec.tokens.size() >= 128) return make_error(ErrorCode::kOutOfRange, "over the context");
    SegmentInfo i;
    i.id = "seg-" + std::to_string(++n_segments_);
    i.tenant = spec.tenant;
    i.cache_salt = spec.cache_salt;
    i.tokens = static_cast<int32_t>(spec.tokens.size());
    i.blocks = i.tokens / 4;
    segments_.push_back(i);
    segment_specs.push_back(spec);
    return i;
  }
  Status delete_segment(const std::string& id, const std::string& tenant) override {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = segments_.begin(); it != segments_.end(); ++it) {
      if (it->id == id && it->tenant == tenant) {
        segments_.erase(it);
        return Status::ok();
      }
    }
    return make_error(ErrorCode::kNotFound, "no segment '", id, "'");
  }
  std::vector<SegmentInfo> list_segments(const std::string& tenant) override {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<SegmentInfo> out;
    for (const SegmentInfo& i : segments_) {
      if (i.tenant == tenant) out.push_back(i);
    }
    return out;
  }
  std::vector<SegmentSpec> segment_specs;  // every successful create, in order

  ServingStats stats() const override {
    ServingStats s;
    s.kv_blocks_used = 7;
    s.kv_blocks_free = 9;
    s.n_waiting = 2;
    s.prefix_hit_tokens = 42;
    s.preemptions = 3;
    std::lock_guard<std::mutex> l(mu_);
    s.per_model = per_model_;
    s.cached_tokens_by_scheme = cached_by_scheme_;
    s.prompt_tokens_by_scheme = prompt_by_scheme_;
    return s;
  }
  const Tokenizer& tokenizer() const override { return tok_; }
  int32_t max_model_len() const override { return 128; }
  int32_t vocab_size() const override { return tok_.n_vocab(); }

  size_t n_active() {
    std::lock_guard<std::mutex> l(mu_);
    return active_.size();
  }
  std::vector<ServeId> cancelled_ids() {
    std::lock_guard<std::mutex> l(mu_);
    return cancelled;
  }
  std::vector<ServeRequest> submitted_requests() {
    std::lock_guard<std::mutex> l(mu_);
    return submitted;
  }
  ServeRequest last_request() {
    std::lock_guard<std::mutex> l(mu_);
    return submitted.empty() ? ServeRequest{} : submitted.back();
  }
  std::vector<std::string> load_calls() {
    std::lock_guard<std::mutex> l(mu_);
    return loads;
  }
  const std::vector<int32_t>& script() const { return script_; }
  // The text of the first n tokens of the script, cycled.
  std::string script_text(int n) const {
    std::string s;
    for (int i = 0; i < n; ++i) s += tok_.token_to_piece(script_[i % script_.size()]);
    return s;
  }

 private:
  std::vector<SegmentInfo> segments_;
  int n_segments_ = 0;
  struct Active {
    ServeRequest req;
    ServeSink sink;
    int emitted = 0;
    bool cancel = false;
    int limit = 0;
  };

  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (!quit_) {
      cv_.wait_for(l, tick, [&] { return quit_; });
      for (auto it = active_.begin(); it != active_.end();) {
        Active& a = it->second;
        ServeEvent e;
        if (a.cancel) {
          e.finish = ServeFinish::kCancelled;
        } else {
          const int32_t id = script_[a.emitted % script_.size()];
          SampleResult s{id, -0.5f, {{id, -0.5f}, {script_[0], -1.5f}}};
          s.top.resize(std::min<size_t>(s.top.size(), a.req.sampling.n_logprobs));
          e.samples.push_back(s);
          if (request_hooks(a.req).return_logits) {
            const bool approx = std::find(approximate_schemes.begin(), approximate_schemes.end(),
                                          a.req.kv_sharing) != approximate_schemes.end();
            e.logits.assign(static_cast<size_t>(tok_.n_vocab()), 0.0f);
            for (size_t v = 0; v < e.logits.size(); ++v)
              e.logits[v] = approx ? 0.01f * static_cast<float>(v % 7) : 0.0f;
            e.logits[static_cast<size_t>(id)] = 3.0f;
          }
          e.text = tok_.token_to_piece(id);
          ++a.emitted;
          if (a.limit >= 0 && a.emitted >= std::min(a.limit, a.req.max_tokens))
            e.finish = ServeFinish::kLength;
        }
        if (a.emitted == 1 || e.finish != ServeFinish::kNone) {
          e.prompt_tokens = static_cast<int32_t>(a.req.prompt.size());
          e.cached_tokens = cached_tokens;
          e.completion_tokens = a.emitted;
          e.queue_s = 0.001;
          e.ttft_s = 0.003;
        }
        const bool done = e.finish != ServeFinish::kNone;
        a.sink(std::move(e));
        it = done ? active_.erase(it) : std::next(it);
      }
      cv_.notify_all();
    }
  }

  Tokenizer tok_;
  std::vector<int32_t> script_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<ServeId, Active> active_;
  std::vector<ServeRequest> submitted;
  std::map<std::string, ServedModel> adapters_;  // by name, as models() lists them
  std::vector<std::string> loads;                // successful loads: "name=path:kind"
  std::map<std::string, AdapterStats> per_model_;
  std::map<std::string, int64_t> cached_by_scheme_, prompt_by_scheme_;
  std::vector<ServeId> cancelled;
  ServeId next_id_ = 1;
  bool draining_ = false;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace agentkv::test
