// A small Prometheus registry: counters, gauges and fixed-bucket histograms,
// all safe to update from any thread, exposed in the text format 0.0.4
// (served at GET /metrics with Content-Type kMetricsContentType).
//
// Metrics are created once (at server start) and live as long as the
// registry; the references it hands out stay valid. Asking twice for the same
// name and labels returns the same metric. Registering a name with another
// type, another help text or other buckets, or an invalid name, is a
// programming error and aborts.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace agentkv::server {

inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void inc(double v = 1.0);  // v >= 0; a negative v is ignored (counters only go up)
  // Brings the counter up to a total kept elsewhere (by the delta; a lower
  // total changes nothing).
  void sync_to(double total) {
    const double d = total - value();
    if (d > 0) inc(d);
  }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void inc(double v = 1.0);
  void dec(double v = 1.0) { inc(-v); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // Upper bounds, strictly increasing and finite; +Inf is implicit.
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf (== count)
    double sum = 0.0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0.0;
};

// Buckets for latencies in seconds, 1 ms to 60 s.
std::vector<double> latency_buckets();

class MetricsRegistry {
 public:
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& histogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                       const Labels& labels = {});

  // The whole registry in text format 0.0.4, families in name order.
  std::string expose() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    Type type;
    std::string help;
    std::vector<double> bounds;  // histograms
    // Keyed by the rendered label set, e.g. `status="200"`.
    std::map<std::string, std::unique_ptr<Counter>> counters;
    std::map<std::string, std::unique_ptr<Gauge>> gauges;
    std::map<std::string, std::unique_ptr<Histogram>> histograms;
  };
  Family& family(const std::string& name, const std::string& help, Type type, const std::vector<double>& bounds);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

// The label set rendered for exposition: k1="v1",k2="v2" with values escaped
// (backslash, double quote, newline).
std::string render_labels(const Labels& labels);

// The server's metrics, registered under their planned names.
struct ServerMetrics {
  explicit ServerMetrics(MetricsRegistry& registry);

  Counter& requests(const std::string& status);  // agentkv_requests_total{status}
  // Per served model (the base under its served name, or an adapter's name):
  Counter& model_requests(const std::string& model);           // agentkv_model_requests_total{model}
  Counter& model_prompt_tokens(const std::string& model);      // agentkv_model_prompt_tokens_total{model}
  Counter& model_cached_tokens(const std::string& model);      // agentkv_model_cached_tokens_total{model}
  Counter& model_completion_tokens(const std::string& model);  // agentkv_model_completion_tokens_total{model}
  // Per KV-sharing scheme (none, alora, icarus):
  Counter& scheme_prompt_tokens(const std::string& scheme);  // agentkv_scheme_prompt_tokens_total{scheme}
  Counter& scheme_cached_tokens(const std::string& scheme);  // agentkv_scheme_cached_tokens_total{scheme}
  Counter& scheme_reused_tokens(const std::string& scheme);  // agentkv_scheme_reused_tokens_total{scheme}
  // agentkv_scheme_computed_token_layers_total{scheme}: K/V entries computed (rows x layers)
  Counter& scheme_computed_token_layers(const std::string& scheme);
  // agentkv_scheme_reused_token_layers_total{scheme}: K/V entries copied, not computed
  Counter& scheme_reused_token_layers(const std::string& scheme);
  Histogram& queue_seconds;
  Histogram& prefill_seconds;
  Histogram& decode_seconds;
  Histogram& ttft_seconds;
  Histogram& inter_token_seconds;
  Gauge& kv_blocks_used;    // agentkv_kv_blocks{state="used"}
  Gauge& kv_blocks_cached;  // agentkv_kv_blocks{state="cached"}
  Gauge& kv_blocks_free;    // agentkv_kv_blocks{state="free"}
  Counter& prefix_hit_tokens;  // agentkv_prefix_hit_tokens_total
  Gauge& frozen_segments;      // agentkv_frozen_segments
  Gauge& frozen_blocks;        // agentkv_frozen_blocks
  Gauge& step_token_layers_max;  // agentkv_step_token_layers_max
  Gauge& prepacked_weight_bytes;  // agentkv_prepacked_weight_bytes (--prepack-weights)
  Counter& segment_evictions;  // agentkv_segment_evictions_total
  Gauge& lr_blocks_used;       // agentkv_lr_cache_blocks{state="used"}: LRAgent's LR cache
  Gauge& lr_blocks_cached;     // agentkv_lr_cache_blocks{state="cached"}
  Gauge& lr_blocks_protected;  // agentkv_lr_cache_blocks{state="protected"}: by agent sessions
  Counter& lr_fallbacks;       // agentkv_lr_fallback_requests_total

 private:
  MetricsRegistry& registry_;
};

}  // namespace agentkv::server
