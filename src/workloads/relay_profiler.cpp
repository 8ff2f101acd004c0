#include "workloads/relay_profiler.h"

#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>

#include "agentkv/serving.h"
#include "tokenizer/tokenizer.h"
#include "util/file_id.h"
#include "workloads/task_text.h"
#include "runtime/request_hooks.h"

namespace agentkv {

namespace {

constexpr int32_t kWaveChains = 32;  // chains whose agent 1 runs at once

constexpr const char* kNames[] = {"Amara", "Bruno", "Chen", "Dalia", "Emil", "Farah", "Goran", "Hana"};
constexpr const char* kCities[] = {"Lisbon", "Oslo", "Quito", "Nairobi", "Hanoi", "Tbilisi", "Perth", "Lyon"};
constexpr const char* kItems[] = {"bicycle", "violin", "telescope", "kayak",
                                  "camera",  "piano",  "tent",      "drone"};

struct Sample {
  std::vector<int32_t> prompt1;
  std::string question;
};

Sample make_sample(const Tokenizer& tok, std::mt19937_64& rng, int32_t doc_tokens) {
  std::vector<std::string> facts;
  std::vector<int32_t> who;
  for (int i = 0; i < 4; ++i) {
    const int32_t n = static_cast<int32_t>(task_uniform(rng, 0, 7));
    who.push_back(n);
    facts.push_back(std::string(" ") + kNames[n] + " lives in " + kCities[task_uniform(rng, 0, 7)] +
                    " and bought a " + kItems[task_uniform(rng, 0, 7)] + " for " +
                    std::to_string(task_uniform(rng, 20, 990)) + " dollars.");
  }
  Sample s;
  s.prompt1 = task_chat_head(tok, "Summarize the facts in this document in a few sentences.");
  const std::vector<int32_t> body = task_filler_with(tok, rng, doc_tokens, facts);
  s.prompt1.insert(s.prompt1.end(), body.begin(), body.end());
  const std::vector<int32_t> tail = task_chat_tail(tok, rng, "Summarize the facts above.", "Summary:", 0);
  s.prompt1.insert(s.prompt1.end(), tail.begin(), tail.end());
  s.question =
      std::string("Where does ") + kNames[who[0]] + " live, and what did " + kNames[who[0]] + " buy?";
  return s;
}

// Runs requests concurrently; the generated tokens of each, or an error.
Result<std::vector<std::vector<int32_t>>> run_all(ServingEngine& e, std::vector<ServeRequest> reqs) {
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  std::vector<std::vector<int32_t>> out(reqs.size());
  std::string error;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto id = e.submit(std::move(reqs[i]), [&, i](ServeEvent&& ev) {
      std::lock_guard<std::mutex> lk(mu);
      for (const SampleResult& s : ev.samples) out[i].push_back(s.id);
      if (ev.finish == ServeFinish::kNone) return;
      if (ev.finish == ServeFinish::kError && error.empty()) error = ev.error;
      ++done;
      cv.notify_all();
    });
    if (!id.is_ok()) {
      std::lock_guard<std::mutex> lk(mu);
      ++done;
      if (error.empty()) error = id.status().message();
    }
  }
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return done == out.size(); });
  if (!error.empty()) return make_error(ErrorCode::kInternal, error);
  return out;
}

// Agent 2's probe of one chain: its prompt (a chat head, agent 1's summary,
// the question) recomputes every layer, and the probe records each reused
// token's V deviation per layer (layer -> position -> deviation; empty when
// nothing was reused). Sets *n_layers to the layers seen.
Result<std::map<int32_t, std::map<int32_t, float>>> probe_chain(ServingEngine& eng,
                                                                const std::vector<int32_t>& p2,
                                                                int32_t* n_layers) {
  std::map<int32_t, std::map<int32_t, float>> d;
  ServeRequest r;
  r.prompt = p2;
  r.max_tokens = 1;
  r.sampling.temperature = 0;
  r.kv_sharing = "relay";
  r.kv_sharing_params.l_start = 0;
  r.kv_sharing_params.l_det = 0;
  r.kv_sharing_params.l_end = eng.n_layers();
  r.kv_sharing_params.dev_threshold = 0;
  r.kv_sharing_params.influence_threshold = 0;
  edit_request_hooks(r).kv_probe = [&d, n_layers](const ServeRequestHooks::KvProbe& pr) {
    *n_layers = std::max(*n_layers, pr.layer + 1);
    for (int64_t j = 0; j < pr.n; ++j) {
      d[pr.layer][pr.pos[j]] =
          value_deviation(pr.v + j * pr.kv_dim, pr.cached_v + j * pr.kv_dim, pr.kv_dim, pr.head_dim);
    }
  };
  std::vector<ServeRequest> one;
  one.push_back(std::move(r));
  AKV_RETURN_IF_ERROR(run_all(eng, std::move(one)).status());
  return d;
}

}  // namespace

Result<RelayCalibration> run_relay_profiler(const RelayProfilerOptions& o) {
  ServingOptions so;
  so.model_path = o.model_path;
  so.n_threads = o.n_threads;
  so.kv_cache_mb = 1024;
  so.max_batch_tokens = 16384;  // one chunk per prompt
  so.relay_capture = "off";     // the probe needs no captures
  AKV_ASSIGN_OR_RETURN(auto eng, create_serving_engine(so));
  const Tokenizer& tok = eng->tokenizer();
  AKV_ASSIGN_OR_RETURN(std::string model_id, file_content_id(o.model_path));
  std::mt19937_64 rng(o.seed);
  std::vector<Sample> samples;
  for (int32_t i = 0; i < o.samples; ++i) samples.push_back(make_sample(tok, rng, o.doc_tokens));
  // Agent 1 runs in waves whose K/V the cache holds until agent 2 reads it
  // (the whole of 128 chains of 256 generated tokens does not fit in 1 GiB:
  // LRU evicted most summaries before their agent 2 ran).
  std::vector<std::vector<int32_t>> summaries(samples.size());
  auto run_wave = [&](int32_t begin, int32_t end) -> Status {
    std::vector<ServeRequest> first;
    for (int32_t i = begin; i < end; ++i) {
      ServeRequest r;
      r.prompt = samples[i].prompt1;
      r.max_tokens = o.gen_tokens;
      r.sampling.temperature = 0;
      first.push_back(std::move(r));
    }
    if (o.progress) {
      o.progress("agent 1: summaries " + std::to_string(begin + 1) + "-" + std::to_string(end) +
                 " of up to " + std::to_string(o.gen_tokens) + " tokens");
    }
    AKV_ASSIGN_OR_RETURN(auto out, run_all(*eng, std::move(first)));
    for (int32_t i = begin; i < end; ++i) summaries[i] = std::move(out[i - begin]);
    return Status::ok();
  };

  int32_t n_layers = 0;
  RelayCalibration cal;
  for (int32_t i = 0; i < o.samples; ++i) {
    if (i % kWaveChains == 0) AKV_RETURN_IF_ERROR(run_wave(i, std::min(i + kWaveChains, o.samples)));
    std::vector<int32_t> p2 = task_chat_head(tok, "Answer the question using only these notes.");
    const int32_t summary_at = static_cast<int32_t>(p2.size());
    p2.insert(p2.end(), summaries[i].begin(), summaries[i].end());
    const std::vector<int32_t> tail = task_chat_tail(tok, rng, samples[i].question, "Answer:", 0);
    p2.insert(p2.end(), tail.begin(), tail.end());
    AKV_ASSIGN_OR_RETURN(auto d, probe_chain(*eng, p2, &n_layers));  // layer -> position -> deviation
    if (d.empty()) {  // the summary was not found (too short, or evicted)
      ++cal.lost;
      if (o.progress)
        o.progress("agent 2: sample " + std::to_string(i + 1) + " found no reused token: left out");
      continue;
    }
    DeviationSample s(n_layers);
    for (int32_t l = 0; l < n_layers; ++l) {
      for (const auto& [pos, v] : d[l]) s[l].push_back(v);
    }
    AKV_ASSIGN_OR_RETURN(RelaySampleStats st, relay_sample_stats(s));
    RelayChain c;
    c.prompt1 = samples[i].prompt1;
    c.summary = summaries[i];
    c.prompt2 = std::move(p2);
    c.summary_at = summary_at;
    for (const auto& [pos, v] : d[0]) c.positions.push_back(pos);
    cal.chains.push_back(std::move(c));
    cal.samples.push_back(std::move(st));
    if (o.progress) {
      o.progress("agent 2: sample " + std::to_string(i + 1) + "/" + std::to_string(o.samples) + ", " +
                 std::to_string(cal.samples.back().tokens) + " reused tokens");
    }
  }
  AKV_ASSIGN_OR_RETURN(cal.profile, relay_profile_from_stats(cal.samples, o.rules));
  cal.profile.model_id = model_id;
  cal.profile.model_name = std::filesystem::path(o.model_path).stem().string();
  cal.profile.seed = o.seed;
  return cal;
}

}  // namespace agentkv
