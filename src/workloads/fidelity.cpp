#include "workloads/fidelity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>

#include "agentkv/serving.h"
#include "tokenizer/tokenizer.h"
#include "util/stats.h"
#include "runtime/request_hooks.h"

namespace agentkv {

namespace {

std::vector<float> log_softmax(const std::vector<float>& logits) {
  std::vector<float> lp = logits;
  const float mx = *std::max_element(lp.begin(), lp.end());
  double sum = 0;
  for (float x : lp) sum += std::exp(double{x} - mx);
  const float lse = mx + static_cast<float>(std::log(sum));
  for (float& x : lp) x -= lse;
  return lp;
}

struct RunOut {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> lps;  // full log-softmax per generated position
  std::string text;
  double ttft_s = 0;
  int32_t reused = 0;
  int64_t prefill_token_layers = 0;
  std::string error;
};

RunOut run_one(ServingEngine& e, ServeRequest req) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  RunOut out;
  auto id = e.submit(std::move(req), [&](ServeEvent&& ev) {
    std::lock_guard<std::mutex> lk(mu);
    for (const SampleResult& s : ev.samples) out.tokens.push_back(s.id);
    if (!ev.logits.empty()) out.lps.push_back(log_softmax(ev.logits));
    out.text += ev.text;
    if (ev.prompt_tokens > 0 && out.ttft_s == 0) {
      out.ttft_s = ev.ttft_s;
      out.reused = ev.reused_tokens;
      out.prefill_token_layers = ev.prefill_token_layers;
    }
    if (ev.finish != ServeFinish::kNone) {
      if (ev.finish == ServeFinish::kError) out.error = ev.error;
      done = true;
      cv.notify_all();
    }
  });
  if (!id.is_ok()) {
    out.error = id.status().message();
    return out;
  }
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return done; });
  return out;
}

// A generated text on one progress line.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return '"' + s + '"';
}

struct Acc {
  std::vector<double> kl, speedup, ttft, reuse, reused;
  int64_t top1 = 0, positions = 0, exact = 0, prompts = 0;
  std::vector<double> scores;  // per-prompt answer scores
};

FidelityRow finish_row(const std::string& label, const Acc& a) {
  FidelityRow r;
  r.label = label;
  const double n = std::max<double>(static_cast<double>(a.prompts), 1);
  for (double x : a.kl) r.mean_kl += x / n, r.max_kl = std::max(r.max_kl, x);
  r.top1 = a.positions ? double(a.top1) / double(a.positions) : 0;
  r.exact = double(a.exact) / n;
  for (double x : a.reuse) r.reuse += x / n;
  for (double x : a.reused) r.reused_tokens += x / n;
  r.ttft_s = median(a.ttft);
  r.speedup = median(a.speedup);
  for (double x : a.scores) r.accuracy += x / n;
  r.scores = a.scores;
  r.kls = a.kl;
  r.reuses = a.reuse;
  return r;
}

// agents: each producer's greedy report (to the end of its turn, at most
// produce_tokens), appended to its document's label; `reports` keeps the
// token ids so the cache step can replay that very decode.
Status produce_reports(ServingEngine& e, FidelityTask& t) {
  t.reports.clear();
  for (size_t d = 0; d < t.producers.size(); ++d) {
    ServeRequest r;
    r.prompt = t.producers[d];
    r.max_tokens = t.produce_tokens;
    RunOut out = run_one(e, std::move(r));
    if (!out.error.empty()) return make_error(ErrorCode::kInternal, "agent ", d + 1, ": ", out.error);
    t.docs[d].insert(t.docs[d].end(), out.tokens.begin(), out.tokens.end());
    t.reports.push_back(std::move(out.tokens));
  }
  return Status::ok();
}

// What runs before a scheme's prompt, so that its documents are in the
// cache: each document alone behind cache_head (RAG), a session of turns
// per request (chat), or each agent's decode replayed token for token
// (agents: the cached report is decode-phase K/V, as in a real workflow).
std::vector<ServeRequest> cache_requests_of(const FidelityTask& t) {
  std::vector<ServeRequest> out;
  if (!t.producers.empty()) {
    for (int32_t d : t.cache_order) {
      ServeRequest c;
      c.prompt = t.producers[d];
      edit_request_hooks(c).forced_tokens = t.reports[d];
      c.max_tokens = std::max<int32_t>(static_cast<int32_t>(t.reports[d].size()), 1);
      c.ignore_eos = true;
      out.push_back(std::move(c));
    }
    return out;
  }
  const size_t group = static_cast<size_t>(std::max(t.cache_group, 1));
  for (size_t g = 0; g < t.cache_order.size(); g += group) {
    ServeRequest c;
    c.prompt = t.cache_head;
    c.max_tokens = 1;
    for (size_t j = g; j < std::min(g + group, t.cache_order.size()); ++j) {
      const auto& doc = t.docs[t.cache_order[j]];
      c.prompt.insert(c.prompt.end(), doc.begin(), doc.end());
    }
    out.push_back(std::move(c));
  }
  return out;
}

// Under relay, the requests run under relay too: that is what has the
// engine capture their hidden states and influence scores (for the agents'
// reports, decode-phase captures), which relay's prompt then resumes from.
// Their own prompts hold nothing another document cached, so they reuse
// nothing.
std::vector<ServeRequest> cache_requests(const FidelityTask& t, const FidelityScheme& sc) {
  std::vector<ServeRequest> out = cache_requests_of(t);
  if (sc.scheme == "relay") {
    for (ServeRequest& c : out) c.kv_sharing = sc.scheme, c.kv_sharing_params = sc.params;
  }
  return out;
}

// One prompt under one scheme, with what it needs from run_fidelity.
struct SchemeRun {
  const FidelityOptions& o;
  const FidelityTask& t;
  const FidelityScheme& sc;
  int32_t index;
  std::string ns;  // tenant: a cache namespace of this prompt and scheme alone
};

ServeRequest scheme_request(const SchemeRun& s, const std::vector<int32_t>& prompt) {
  ServeRequest r;
  r.prompt = prompt;
  r.max_tokens = s.o.gen_tokens;
  r.ignore_eos = true;
  r.tenant = s.ns;
  r.kv_sharing = s.sc.scheme;
  r.kv_sharing_params = s.sc.params;
  return r;
}

// Mean KL(p || q) over the positions both have, and how many of them have
// the same argmax.
std::pair<double, int64_t> compare(const std::vector<std::vector<float>>& p,
                                   const std::vector<std::vector<float>>& q, int64_t& positions) {
  double sum = 0;
  int64_t agree = 0;
  const size_t n = std::min(p.size(), q.size());
  for (size_t j = 0; j < n; ++j) {
    const int64_t v = static_cast<int64_t>(std::min(p[j].size(), q[j].size()));
    sum += kl_divergence(p[j].data(), q[j].data(), v);
    agree += std::max_element(p[j].begin(), p[j].begin() + v) - p[j].begin() ==
             std::max_element(q[j].begin(), q[j].begin() + v) - q[j].begin();
  }
  positions += static_cast<int64_t>(n);
  return {n ? sum / double(n) : 0, agree};
}

Status run_scheme(const SchemeRun& s, ServingEngine& full_eng, ServingEngine& eng, const RunOut& ref,
                  const std::vector<int32_t>& prompt, Acc& a) {
  FidelityRequestLog log;
  log.prompt_index = s.index;
  log.scheme = &s.sc;
  log.prompt = prompt;
  for (ServeRequest& c : cache_requests(s.t, s.sc)) {
    log.cache_prompts.push_back(c.prompt);
    log.cache_forced.push_back(request_hooks(c).forced_tokens);
    log.cache_under_scheme = !c.kv_sharing.empty();
    c.tenant = s.ns;
    run_one(eng, std::move(c));
  }
  const bool scheme_teaches = s.o.teacher == "scheme";
  RunOut measured;  // the run whose TTFT and reuse are reported
  std::vector<std::vector<float>> exact;
  if (!scheme_teaches) {
    ServeRequest tf = scheme_request(s, prompt);
    ServeRequestHooks& th = edit_request_hooks(tf);
    th.forced_tokens = ref.tokens;
    th.return_logits = true;
    measured = run_one(eng, std::move(tf));
    if (!measured.error.empty()) return make_error(ErrorCode::kInternal, s.sc.label, ": ", measured.error);
  }
  // The free-running greedy run may hit the prefix blocks the forced run
  // committed (the chat header), as any later agent would.
  ServeRequest gr = scheme_request(s, prompt);
  if (scheme_teaches) edit_request_hooks(gr).return_logits = true;
  RunOut greedy = run_one(eng, std::move(gr));
  if (!greedy.error.empty()) return make_error(ErrorCode::kInternal, s.sc.label, ": ", greedy.error);
  if (scheme_teaches) {
    // serve --fidelity-audit's re-run: exact, forced on what was served.
    ServeRequest fr;
    fr.prompt = prompt;
    fr.max_tokens = static_cast<int32_t>(greedy.tokens.size());
    fr.ignore_eos = true;
    fr.tenant = s.ns;
    ServeRequestHooks& fh = edit_request_hooks(fr);
    fh.forced_tokens = greedy.tokens;
    fh.return_logits = true;
    RunOut rerun = run_one(full_eng, std::move(fr));
    if (!rerun.error.empty()) return make_error(ErrorCode::kInternal, "full re-run: ", rerun.error);
    exact = std::move(rerun.lps);
    measured = greedy;
  }
  ++a.prompts;
  const auto [kl, agree] = compare(scheme_teaches ? exact : ref.lps, measured.lps, a.positions);
  a.top1 += agree;
  a.kl.push_back(kl);
  a.exact += greedy.tokens == ref.tokens;
  a.scores.push_back(fidelity_answer_score(greedy.text, s.t.answers));
  a.ttft.push_back(measured.ttft_s);
  a.speedup.push_back(ref.ttft_s / std::max(measured.ttft_s, 1e-9));
  // The reference engine has no cache: its prefill computed every entry.
  const double dense = double(std::max<int64_t>(ref.prefill_token_layers, 1));
  a.reuse.push_back(1.0 - double(measured.prefill_token_layers) / dense);
  a.reused.push_back(measured.reused);
  if (s.o.on_request) {
    log.tokens = greedy.tokens;
    log.reference = ref.tokens;
    log.kl = kl;
    s.o.on_request(log);
  }
  return Status::ok();
}

}  // namespace

Result<FidelityReport> run_fidelity(const FidelityOptions& o) {
  if (o.teacher != "full" && o.teacher != "scheme") {
    return make_error(ErrorCode::kInvalidArgument, "teacher '", o.teacher, "': expected full or scheme");
  }
  ServingOptions so;
  so.model_path = o.model_path;
  so.n_threads = o.n_threads;
  so.block_size = o.block_size;
  so.kv_cache_mb = o.kv_cache_mb;
  so.kv_dtype = o.kv_dtype;
  so.act_quant = o.act_quant;
  so.max_batch_tokens = o.max_batch_tokens;
  so.prefix_caching = false;
  AKV_ASSIGN_OR_RETURN(auto full_eng, create_serving_engine(so));
  so.prefix_caching = true;
  for (const FidelityScheme& sc : o.schemes) {
    if (sc.scheme == "relay") so.relay_profile = o.relay_profile;
  }
  AKV_ASSIGN_OR_RETURN(auto eng, create_serving_engine(so));
  const Tokenizer& tok = eng->tokenizer();
  AKV_ASSIGN_OR_RETURN(std::vector<FidelityTask> tasks, make_fidelity_tasks(tok, o.tasks));
  FidelityReport rep;
  rep.task = o.tasks.kind;
  Acc full_acc;
  std::vector<Acc> acc(o.schemes.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    FidelityTask& t = tasks[i];
    AKV_RETURN_IF_ERROR(produce_reports(*full_eng, t));
    if (o.progress) {
      for (size_t d = 0; d < t.reports.size(); ++d) {
        o.progress(o.tasks.kind + " prompt " + std::to_string(i + 1) + ": agent " + std::to_string(d + 1) +
                   " (" + std::to_string(t.reports[d].size()) + " tokens) reported " +
                   one_line(tok.decode(t.reports[d])));
      }
    }
    const std::vector<int32_t> prompt = t.prompt();
    if (i == 0) rep.prompt_tokens = static_cast<int32_t>(prompt.size());
    const std::string tenant = "fidelity-" + std::to_string(i);
    ServeRequest fr;
    fr.prompt = prompt;
    fr.max_tokens = o.gen_tokens;
    fr.ignore_eos = true;
    fr.tenant = tenant;
    edit_request_hooks(fr).return_logits = true;
    RunOut ref = run_one(*full_eng, std::move(fr));
    if (!ref.error.empty()) return make_error(ErrorCode::kInternal, "full prefill: ", ref.error);
    ++full_acc.prompts;
    full_acc.ttft.push_back(ref.ttft_s);
    full_acc.scores.push_back(fidelity_answer_score(ref.text, t.answers));
    if (o.progress) {
      o.progress(o.tasks.kind + " prompt " + std::to_string(i + 1) + "/" + std::to_string(tasks.size()) +
                 " (" + std::to_string(prompt.size()) + " tokens): full TTFT " + std::to_string(ref.ttft_s) +
                 " s, score " + std::to_string(fidelity_answer_score(ref.text, t.answers)) + " of " +
                 one_line(ref.text));
    }
    for (size_t k = 0; k < o.schemes.size(); ++k) {
      // Each scheme starts from the same cache state: the documents cached
      // alone, in the task's order, under a namespace of its own.
      const SchemeRun run{o, t, o.schemes[k], static_cast<int32_t>(i), tenant + "/" + std::to_string(k)};
      AKV_RETURN_IF_ERROR(run_scheme(run, *full_eng, *eng, ref, prompt, acc[k]));
    }
  }
  rep.full = finish_row("full", full_acc);
  rep.full.top1 = 1, rep.full.exact = 1, rep.full.speedup = 1;
  for (size_t k = 0; k < o.schemes.size(); ++k) rep.rows.push_back(finish_row(o.schemes[k].label, acc[k]));
  return rep;
}

FidelityRow fidelity_average_row(const std::string& label, const std::vector<FidelityRow>& rows) {
  FidelityRow r;
  r.label = label;
  const double n = std::max<double>(static_cast<double>(rows.size()), 1);
  for (const FidelityRow& x : rows) {
    r.mean_kl += x.mean_kl / n;
    r.max_kl = std::max(r.max_kl, x.max_kl);
    r.top1 += x.top1 / n;
    r.exact += x.exact / n;
    r.reuse += x.reuse / n;
    r.reused_tokens += x.reused_tokens / n;
    r.ttft_s += x.ttft_s / n;
    r.speedup += x.speedup / n;
    r.accuracy += x.accuracy / n;
    r.scores.insert(r.scores.end(), x.scores.begin(), x.scores.end());
    r.kls.insert(r.kls.end(), x.kls.begin(), x.kls.end());
    r.reuses.insert(r.reuses.end(), x.reuses.begin(), x.reuses.end());
  }
  return r;
}

}  // namespace agentkv
