#include "server/metrics.h"

#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace agentkv::server {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The value on the exposition line that starts with `series ` exactly.
std::string value_of(const std::string& text, const std::string& series) {
  for (const std::string& line : lines_of(text)) {
    if (line.rfind(series + " ", 0) == 0) return line.substr(series.size() + 1);
  }
  return "<missing " + series + ">";
}

TEST(Metrics, CounterAndGaugeExposition) {
  MetricsRegistry r;
  Counter& ok = r.counter("agentkv_requests_total", "Requests answered, by HTTP status.", {{"status", "200"}});
  Counter& bad = r.counter("agentkv_requests_total", "Requests answered, by HTTP status.", {{"status", "400"}});
  EXPECT_EQ(&ok, &r.counter("agentkv_requests_total", "Requests answered, by HTTP status.", {{"status", "200"}}));
  ok.inc();
  ok.inc(2);
  ok.inc(-5);  // ignored: counters only go up
  bad.inc();
  Gauge& g = r.gauge("agentkv_kv_blocks", "KV cache blocks by state.", {{"state", "free"}});
  g.set(10);
  g.dec(3);
  g.inc(0.5);
  const std::string text = r.expose();
  const auto lines = lines_of(text);
  ASSERT_EQ(lines.size(), 7u) << text;
  // Families in name order, HELP then TYPE then samples.
  EXPECT_EQ(lines[0], "# HELP agentkv_kv_blocks KV cache blocks by state.");
  EXPECT_EQ(lines[1], "# TYPE agentkv_kv_blocks gauge");
  EXPECT_EQ(lines[2], "agentkv_kv_blocks{state=\"free\"} 7.5");
  EXPECT_EQ(lines[3], "# HELP agentkv_requests_total Requests answered, by HTTP status.");
  EXPECT_EQ(lines[4], "# TYPE agentkv_requests_total counter");
  EXPECT_EQ(lines[5], "agentkv_requests_total{status=\"200\"} 3");
  EXPECT_EQ(lines[6], "agentkv_requests_total{status=\"400\"} 1");
  EXPECT_EQ(text.back(), '\n');
}

TEST(Metrics, LabelAndHelpEscaping) {
  EXPECT_EQ(render_labels({{"a", "x\"y"}, {"b", "back\\slash"}, {"c", "two\nlines"}}),
            "a=\"x\\\"y\",b=\"back\\\\slash\",c=\"two\\nlines\"");
  MetricsRegistry r;
  r.counter("c_total", "help with \\ and\nnewline").inc();
  const auto lines = lines_of(r.expose());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "# HELP c_total help with \\\\ and\\nnewline");
  EXPECT_EQ(lines[2], "c_total 1");
}

TEST(Metrics, HistogramBucketsAreCumulativeAndInfEqualsCount) {
  MetricsRegistry r;
  Histogram& h = r.histogram("agentkv_ttft_seconds", "Time to first token.", {0.1, 0.5, 1.0});
  const std::vector<double> obs = {0.05, 0.1, 0.2, 0.5, 0.7, 3.0, 100.0};
  double sum = 0;
  for (double v : obs) {
    h.observe(v);
    sum += v;
  }
  const std::string text = r.expose();
  // Expected counts computed from the observations: le is inclusive.
  auto count_le = [&](double b) {
    int n = 0;
    for (double v : obs) n += v <= b;
    return std::to_string(n);
  };
  EXPECT_EQ(value_of(text, "agentkv_ttft_seconds_bucket{le=\"0.1\"}"), count_le(0.1));
  EXPECT_EQ(value_of(text, "agentkv_ttft_seconds_bucket{le=\"0.5\"}"), count_le(0.5));
  EXPECT_EQ(value_of(text, "agentkv_ttft_seconds_bucket{le=\"1\"}"), count_le(1.0));
  EXPECT_EQ(value_of(text, "agentkv_ttft_seconds_bucket{le=\"+Inf\"}"), std::to_string(obs.size()));
  EXPECT_EQ(value_of(text, "agentkv_ttft_seconds_count"), std::to_string(obs.size()));
  EXPECT_DOUBLE_EQ(std::stod(value_of(text, "agentkv_ttft_seconds_sum")), sum);
  // Line order: HELP, TYPE, buckets ascending, sum, count.
  const auto lines = lines_of(text);
  ASSERT_EQ(lines.size(), 2u + 4u + 2u);
  EXPECT_EQ(lines[1], "# TYPE agentkv_ttft_seconds histogram");
  EXPECT_EQ(lines[5].rfind("agentkv_ttft_seconds_bucket{le=\"+Inf\"}", 0), 0u);
  EXPECT_EQ(lines[6].rfind("agentkv_ttft_seconds_sum", 0), 0u);
  EXPECT_EQ(lines[7].rfind("agentkv_ttft_seconds_count", 0), 0u);
}

TEST(Metrics, HistogramWithLabelsPutsLeLast) {
  MetricsRegistry r;
  r.histogram("h_seconds", "h", {1.0}, {{"phase", "prefill"}}).observe(0.5);
  const std::string text = r.expose();
  EXPECT_EQ(value_of(text, "h_seconds_bucket{phase=\"prefill\",le=\"1\"}"), "1");
  EXPECT_EQ(value_of(text, "h_seconds_bucket{phase=\"prefill\",le=\"+Inf\"}"), "1");
  EXPECT_EQ(value_of(text, "h_seconds_count{phase=\"prefill\"}"), "1");
}

TEST(Metrics, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry r;
  Counter& c = r.counter("c_total", "c");
  Histogram& h = r.histogram("h", "h", latency_buckets());
  Gauge& g = r.gauge("g", "g");
  constexpr int kThreads = 4, kPer = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPer; ++i) {
        c.inc();
        g.inc();
        h.observe(0.003);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), kThreads * kPer);
  EXPECT_EQ(g.value(), kThreads * kPer);
  const Histogram::Snapshot s = h.snapshot();
  EXPECT_EQ(s.count, static_cast<uint64_t>(kThreads * kPer));
  EXPECT_EQ(s.cumulative.back(), s.count);
  for (std::size_t i = 1; i < s.cumulative.size(); ++i) EXPECT_LE(s.cumulative[i - 1], s.cumulative[i]);
}

TEST(Metrics, ServerMetricsUseThePlannedNames) {
  MetricsRegistry r;
  ServerMetrics m(r);
  m.requests("200").inc();
  m.ttft_seconds.observe(0.2);
  m.kv_blocks_used.set(3);
  m.kv_blocks_cached.set(2);
  m.kv_blocks_free.set(5);
  m.prefix_hit_tokens.inc(64);
  const std::string text = r.expose();
  for (const char* family : {"agentkv_requests_total", "agentkv_queue_seconds", "agentkv_prefill_seconds",
                             "agentkv_decode_seconds", "agentkv_ttft_seconds", "agentkv_inter_token_seconds",
                             "agentkv_kv_blocks", "agentkv_prefix_hit_tokens_total"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + family + " "), std::string::npos) << family;
  }
  EXPECT_EQ(value_of(text, "agentkv_requests_total{status=\"200\"}"), "1");
  EXPECT_EQ(value_of(text, "agentkv_kv_blocks{state=\"used\"}"), "3");
  EXPECT_EQ(value_of(text, "agentkv_kv_blocks{state=\"cached\"}"), "2");
  EXPECT_EQ(value_of(text, "agentkv_kv_blocks{state=\"free\"}"), "5");
  EXPECT_EQ(value_of(text, "agentkv_prefix_hit_tokens_total"), "64");
  EXPECT_EQ(value_of(text, "agentkv_ttft_seconds_count"), "1");
  EXPECT_EQ(value_of(text, "agentkv_queue_seconds_count"), "0");
}

TEST(MetricsDeathTest, MisuseAborts) {
  EXPECT_DEATH(
      {
        MetricsRegistry r;
        r.counter("x", "a");
        r.gauge("x", "a");
      },
      "registered twice");
  EXPECT_DEATH({ MetricsRegistry().counter("bad-name", "a"); }, "invalid metric name");
  EXPECT_DEATH({ MetricsRegistry().histogram("h", "a", {1.0}, {{"le", "x"}}); }, "invalid label name");
  EXPECT_DEATH({ Histogram h({2.0, 1.0}); }, "strictly increasing");
}

}  // namespace
}  // namespace agentkv::server
