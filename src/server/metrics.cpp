#include "server/metrics.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace agentkv::server {
namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "metrics: %s\n", what.c_str());
  std::abort();
}

bool valid_name(const std::string& s, bool colons) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colons && c == ':') ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

void add_atomic(std::atomic<double>& a, double v) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

// Shortest text that reads back as the same double; Prometheus spellings of
// the non-finite values.
std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : std::string("NaN");
}

std::string escape_help(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// `base` plus one more label, in braces; no braces when there are no labels.
std::string braces(const std::string& rendered, const std::string& extra = "") {
  if (rendered.empty() && extra.empty()) return "";
  if (rendered.empty()) return "{" + extra + "}";
  if (extra.empty()) return "{" + rendered + "}";
  return "{" + rendered + "," + extra + "}";
}

}  // namespace

void Counter::inc(double v) {
  if (!(v >= 0.0)) return;
  add_atomic(value_, v);
}

void Gauge::inc(double v) { add_atomic(value_, v); }

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && !(bounds_[i] > bounds_[i - 1]))) {
      fail("histogram bounds must be finite and strictly increasing");
    }
  }
}

void Histogram::observe(double v) {
  if (std::isnan(v)) return;  // would poison _sum forever
  // The first bucket whose upper bound is >= v ("le" is inclusive).
  std::size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += v;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_;
  return s;
}

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0};
}

std::string render_labels(const Labels& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {
    if (!out.empty()) out += ',';
    out += k;
    out += "=\"";
    for (char c : v) {
      if (c == '\\') out += "\\\\";
      else if (c == '"') out += "\\\"";
      else if (c == '\n') out += "\\n";
      else out += c;
    }
    out += '"';
  }
  return out;
}

MetricsRegistry::Family& MetricsRegistry::family(const std::string& name, const std::string& help, Type type,
                                                 const std::vector<double>& bounds) {
  if (!valid_name(name, /*colons=*/true)) fail("invalid metric name '" + name + "'");
  auto [it, inserted] = families_.try_emplace(name);
  Family& f = it->second;
  if (inserted) {
    f.type = type;
    f.help = help;
    f.bounds = bounds;
  } else if (f.type != type || f.help != help || f.bounds != bounds) {
    fail("metric '" + name + "' registered twice with different type, help or buckets");
  }
  return f;
}

namespace {
std::string checked_labels(const Labels& labels, bool histogram) {
  for (const auto& [k, v] : labels) {
    if (!valid_name(k, /*colons=*/false) || k.rfind("__", 0) == 0 || (histogram && k == "le")) {
      fail("invalid label name '" + k + "'");
    }
  }
  return render_labels(labels);
}
}  // namespace

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help, const Labels& labels) {
  const std::string key = checked_labels(labels, false);
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = family(name, help, Type::kCounter, {}).counters[key];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& MetricsRegistry::gauge(const std::string& name, const std::string& help, const Labels& labels) {
  const std::string key = checked_labels(labels, false);
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = family(name, help, Type::kGauge, {}).gauges[key];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                      const std::vector<double>& bounds, const Labels& labels) {
  const std::string key = checked_labels(labels, true);
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = family(name, help, Type::kHistogram, bounds).histograms[key];
  if (!slot) slot = std::make_unique<Histogram>(bounds);
  return *slot;
}

std::string MetricsRegistry::expose() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    out += "# HELP " + name + " " + escape_help(f.help) + "\n";
    switch (f.type) {
      case Type::kCounter:
        out += "# TYPE " + name + " counter\n";
        for (const auto& [labels, c] : f.counters) out += name + braces(labels) + " " + format_value(c->value()) + "\n";
        break;
      case Type::kGauge:
        out += "# TYPE " + name + " gauge\n";
        for (const auto& [labels, g] : f.gauges) out += name + braces(labels) + " " + format_value(g->value()) + "\n";
        break;
      case Type::kHistogram:
        out += "# TYPE " + name + " histogram\n";
        for (const auto& [labels, h] : f.histograms) {
          const Histogram::Snapshot s = h->snapshot();
          for (std::size_t i = 0; i <= s.bounds.size(); ++i) {
            const std::string le = i < s.bounds.size() ? format_value(s.bounds[i]) : "+Inf";
            out += name + "_bucket" + braces(labels, "le=\"" + le + "\"") + " " + std::to_string(s.cumulative[i]) + "\n";
          }
          out += name + "_sum" + braces(labels) + " " + format_value(s.sum) + "\n";
          out += name + "_count" + braces(labels) + " " + std::to_string(s.count) + "\n";
        }
        break;
    }
  }
  return out;
}

ServerMetrics::ServerMetrics(MetricsRegistry& registry)
    : queue_seconds(registry.histogram("agentkv_queue_seconds", "Time from arrival to first scheduling.",
                                       latency_buckets())),
      prefill_seconds(registry.histogram("agentkv_prefill_seconds", "Time spent computing the prompt.",
                                         latency_buckets())),
      decode_seconds(registry.histogram("agentkv_decode_seconds", "Time from first to last generated token.",
                                        latency_buckets())),
      ttft_seconds(registry.histogram("agentkv_ttft_seconds",
                                      "Time from arrival to the first generated token.", latency_buckets())),
      inter_token_seconds(registry.histogram(
          "agentkv_inter_token_seconds", "Time between consecutive generated tokens.", latency_buckets())),
      kv_blocks_used(registry.gauge("agentkv_kv_blocks", "KV cache blocks by state.", {{"state", "used"}})),
      kv_blocks_cached(
          registry.gauge("agentkv_kv_blocks", "KV cache blocks by state.", {{"state", "cached"}})),
      kv_blocks_free(registry.gauge("agentkv_kv_blocks", "KV cache blocks by state.", {{"state", "free"}})),
      prefix_hit_tokens(
          registry.counter("agentkv_prefix_hit_tokens_total", "Prompt tokens served from the prefix cache.")),
      frozen_segments(
          registry.gauge("agentkv_frozen_segments", "Frozen (pinned) segments: POST /v1/segments.")),
      frozen_blocks(registry.gauge("agentkv_frozen_blocks", "KV cache blocks pinned by frozen segments.")),
      step_token_layers_max(
          registry.gauge("agentkv_step_token_layers_max",
                         "The most K/V entries (token rows x layers) one engine step computed.")),
      prepacked_weight_bytes(registry.gauge(
          "agentkv_prepacked_weight_bytes",
          "Bytes of layer weights laid out once for the prefill kernels (--prepack-weights; 0 when off).")),
      segment_evictions(registry.counter("agentkv_segment_evictions_total",
                                         "Frozen segments evicted above the KV utilisation watermark.")),
      lr_blocks_used(registry.gauge("agentkv_lr_cache_blocks", "LRAgent LR cache blocks by state.",
                                    {{"state", "used"}})),
      lr_blocks_cached(registry.gauge("agentkv_lr_cache_blocks", "LRAgent LR cache blocks by state.",
                                      {{"state", "cached"}})),
      lr_blocks_protected(registry.gauge("agentkv_lr_cache_blocks", "LRAgent LR cache blocks by state.",
                                         {{"state", "protected"}})),
      lr_fallbacks(registry.counter("agentkv_lr_fallback_requests_total",
                                    "lragent-baselr requests for an adapter in no shared-A group, served by "
                                    "BaseShared rules.")),
      registry_(registry) {}

Counter& ServerMetrics::requests(const std::string& status) {
  return registry_.counter("agentkv_requests_total", "Requests answered, by HTTP status.", {{"status", status}});
}

Counter& ServerMetrics::model_requests(const std::string& model) {
  return registry_.counter("agentkv_model_requests_total", "Requests admitted, by model (base or adapter).",
                           {{"model", model}});
}

Counter& ServerMetrics::model_prompt_tokens(const std::string& model) {
  return registry_.counter("agentkv_model_prompt_tokens_total", "Prompt tokens of admitted requests, by model.",
                           {{"model", model}});
}

Counter& ServerMetrics::model_cached_tokens(const std::string& model) {
  return registry_.counter("agentkv_model_cached_tokens_total",
                           "Prompt tokens served from the KV cache, by model.", {{"model", model}});
}

Counter& ServerMetrics::model_completion_tokens(const std::string& model) {
  return registry_.counter("agentkv_model_completion_tokens_total", "Tokens generated, by model.",
                           {{"model", model}});
}

Counter& ServerMetrics::scheme_prompt_tokens(const std::string& scheme) {
  return registry_.counter("agentkv_scheme_prompt_tokens_total",
                           "Prompt tokens of admitted requests, by KV-sharing scheme.", {{"scheme", scheme}});
}

Counter& ServerMetrics::scheme_cached_tokens(const std::string& scheme) {
  return registry_.counter("agentkv_scheme_cached_tokens_total",
                           "Prompt tokens served from the KV cache, by KV-sharing scheme.", {{"scheme", scheme}});
}

Counter& ServerMetrics::scheme_reused_tokens(const std::string& scheme) {
  return registry_.counter("agentkv_scheme_reused_tokens_total",
                           "Prompt tokens whose K/V was copied from a cached segment, by KV-sharing scheme.",
                           {{"scheme", scheme}});
}

Counter& ServerMetrics::scheme_reused_token_layers(const std::string& scheme) {
  return registry_.counter("agentkv_scheme_reused_token_layers_total",
                           "K/V entries (token x layer) of prefilled prompt positions copied from cached segments "
                           "instead of computed, by KV-sharing scheme (the reuse rate's numerator).",
                           {{"scheme", scheme}});
}

Counter& ServerMetrics::scheme_computed_token_layers(const std::string& scheme) {
  return registry_.counter("agentkv_scheme_computed_token_layers_total",
                           "K/V entries computed (token rows times layers), by KV-sharing scheme.",
                           {{"scheme", scheme}});
}

}  // namespace agentkv::server
