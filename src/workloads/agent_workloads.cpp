#include "workloads/agent_workloads.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>

#include "adapter/synth_adapter.h"
#include "agentkv/serving.h"
#include "backend/kv_dtype.h"
#include "runtime/loaded_model.h"
#include "tokenizer/tokenizer.h"
#include "util/stats.h"
#include "workloads/engine_requests.h"

namespace agentkv {

namespace {

using Clock = std::chrono::steady_clock;
using bench::Done;
using bench::first_error;
using bench::random_prompt;
using bench::request;
using bench::run_together;

int64_t kv_mb_for_tokens(const ModelSpec& s, int64_t tokens, int32_t block_size,
                         const std::string& kv_dtype) {
  const int64_t per_token =
      int64_t{2} * s.n_layers * s.kv_dim() * kv_dtype_bytes(kv_dtype_parse(kv_dtype).value_or(KvDType::kF32));
  const int64_t blocks = tokens / block_size + 64;
  return blocks * block_size * per_token / (int64_t{1} << 20) + 16;
}

// An engine whose pool holds n_seqs sequences of `longest` tokens at once, so
// nothing is evicted and what the scheme keeps is what the pool holds.
ServingOptions engine_options(const AgentBenchOptions& o, const ModelSpec& spec, int64_t longest,
                              int64_t n_seqs, const std::string& scheme) {
  ServingOptions so;
  so.model_path = o.model_path;
  so.n_threads = o.n_threads;
  so.block_size = o.block_size;
  so.max_batch_tokens = o.max_batch_tokens;
  so.max_model_len = static_cast<int32_t>(longest + 64);
  so.kv_dtype = o.kv_dtype;
  so.kv_cache_mb = kv_mb_for_tokens(spec, longest * n_seqs, o.block_size, o.kv_dtype);
  so.kv_sharing = scheme;
  return so;
}

}  // namespace

Result<std::vector<PipelineResult>> run_alora_pipeline(const AgentBenchOptions& o, const PipelineOptions& p) {
  AKV_ASSIGN_OR_RETURN(LoadedModel lm, load_model_file(o.model_path, o.n_threads));
  const ModelSpec& spec = lm.model->spec;
  const std::vector<int32_t> invocation =
      lm.tokenizer->encode("<|im_start|>assistant\nEvaluation:", false, true);
  std::filesystem::create_directories(o.work_dir);
  std::vector<ServingOptions::AdapterSpec> alora, lora;
  for (int32_t i = 0; i < p.n_adapters; ++i) {
    SynthAdapterConfig c;
    c.seed = o.seed + 100 + static_cast<uint64_t>(i);
    c.rank = p.alora_rank;
    c.invocation_tokens = invocation;
    const std::string a_dir = o.work_dir + "/alora_" + std::to_string(i);
    AKV_ASSIGN_OR_RETURN(auto ra, synth_adapter_write(c, *lm.model, a_dir));
    c.rank = p.lora_rank;
    c.invocation_tokens.clear();
    const std::string l_dir = o.work_dir + "/lora_" + std::to_string(i);
    AKV_ASSIGN_OR_RETURN(auto rl, synth_adapter_write(c, *lm.model, l_dir));
    (void)ra;
    (void)rl;
    alora.push_back({"eval" + std::to_string(i), a_dir, ""});
    lora.push_back({"eval" + std::to_string(i), l_dir, ""});
  }

  std::vector<PipelineResult> results;
  int round = 0;
  for (int32_t L : p.prompt_lens) {
    const std::vector<int32_t> x = random_prompt(L, spec.n_vocab, o.seed + static_cast<uint64_t>(L));
    const int64_t longest = int64_t{L} + p.base_tokens + int64_t{p.n_adapters} * p.adapter_tokens +
                            static_cast<int64_t>(invocation.size()) + 64;
    // Interleaved: the variant that goes first alternates with L.
    const bool alora_first = round++ % 2 == 0;
    for (int v = 0; v < 2; ++v) {
      const bool is_alora = (v == 0) == alora_first;
      if (o.progress) o.progress("L=" + std::to_string(L) + " " + (is_alora ? "alora" : "lora/none"));
      ServingOptions so = engine_options(o, spec, longest, p.n_adapters + 2, is_alora ? "alora" : "none");
      so.adapters = is_alora ? alora : lora;
      AKV_ASSIGN_OR_RETURN(auto eng, create_serving_engine(so));

      PipelineResult r;
      r.prompt_len = L;
      r.variant = is_alora ? "alora" : "lora/none";
      std::vector<Done> t1 = run_together(*eng, {request(x, p.base_tokens, "")});
      AKV_RETURN_IF_ERROR(first_error(t1));
      r.base_ttft_s = t1[0].ttft_s;
      std::vector<int32_t> xy = x;
      xy.insert(xy.end(), t1[0].tokens.begin(), t1[0].tokens.end());
      std::vector<int32_t> eval_prompt = xy;
      eval_prompt.insert(eval_prompt.end(), invocation.begin(), invocation.end());
      std::vector<ServeRequest> evals;
      for (int32_t i = 0; i < p.n_adapters; ++i)
        evals.push_back(request(eval_prompt, p.adapter_tokens, "eval" + std::to_string(i)));
      std::vector<Done> t2 = run_together(*eng, std::move(evals));
      AKV_RETURN_IF_ERROR(first_error(t2));
      std::vector<double> ttft, e2e;
      double cached = 0;
      std::vector<int32_t> x3 = xy;
      for (const Done& d : t2) {
        ttft.push_back(d.ttft_s);
        e2e.push_back(d.e2e_s);
        cached += double(d.cached) / std::max(1, d.prompt_tokens);
        x3.insert(x3.end(), d.tokens.begin(), d.tokens.end());
      }
      r.adapter_ttft_s = median(ttft);
      r.adapter_e2e_s = median(e2e);
      r.adapter_cached = cached / p.n_adapters;
      std::vector<Done> t3 = run_together(*eng, {request(x3, p.adapter_tokens, "")});
      AKV_RETURN_IF_ERROR(first_error(t3));
      r.base2_ttft_s = t3[0].ttft_s;
      r.base2_cached = double(t3[0].cached) / std::max(1, t3[0].prompt_tokens);
      results.push_back(r);
    }
  }
  return results;
}

Result<std::vector<RoundRobinResult>> run_icarus_round_robin(const AgentBenchOptions& o,
                                                             const RoundRobinOptions& rr) {
  AKV_ASSIGN_OR_RETURN(LoadedModel lm, load_model_file(o.model_path, o.n_threads));
  const ModelSpec& spec = lm.model->spec;
  std::filesystem::create_directories(o.work_dir);
  std::vector<ServingOptions::AdapterSpec> agents;
  for (int32_t i = 0; i < rr.n_agents; ++i) {
    SynthAdapterConfig c;
    c.seed = o.seed + 200 + static_cast<uint64_t>(i);
    c.rank = rr.rank;
    const std::string dir = o.work_dir + "/icarus_" + std::to_string(i);
    AKV_ASSIGN_OR_RETURN(auto rep, synth_adapter_write(c, *lm.model, dir));
    (void)rep;
    agents.push_back({"agent" + std::to_string(i), dir, "icarus"});
  }
  const int64_t longest = int64_t{rr.prompt_len} + int64_t{rr.turns} * rr.turn_tokens + 64;
  std::vector<RoundRobinResult> results;
  for (const char* scheme : {"icarus", "none"}) {
    if (o.progress) o.progress(std::string("round robin under ") + scheme);
    ServingOptions so = engine_options(o, spec, longest, rr.n_agents + 1, scheme);
    so.adapters = agents;
    AKV_ASSIGN_OR_RETURN(auto eng, create_serving_engine(so));
    RoundRobinResult r;
    r.scheme = scheme;
    std::vector<int32_t> traj = random_prompt(rr.prompt_len, spec.n_vocab, o.seed + 7);
    std::vector<double> ttft;
    const Clock::time_point t0 = Clock::now();
    for (int32_t t = 0; t < rr.turns; ++t) {
      std::vector<Done> d =
          run_together(*eng, {request(traj, rr.turn_tokens, "agent" + std::to_string(t % rr.n_agents))});
      AKV_RETURN_IF_ERROR(first_error(d));
      r.prompt_tokens += d[0].prompt_tokens;
      r.computed_tokens += d[0].prompt_tokens - d[0].cached;
      ttft.push_back(d[0].ttft_s);
      traj.insert(traj.end(), d[0].tokens.begin(), d[0].tokens.end());
    }
    r.total_s = std::chrono::duration<double>(Clock::now() - t0).count();
    r.median_ttft_s = median(ttft);
    const ServingStats s = eng->stats();
    r.kv_blocks = s.kv_blocks_used + s.kv_blocks_cached;
    r.kv_mib = double(r.kv_blocks) * double(s.kv_bytes_per_block) / double(1 << 20);
    results.push_back(r);
  }
  return results;
}

namespace {

// What every scheme of one team-docs trace shares: the documents, the
// aLoRA invocation and the model's vocabulary.
struct TeamTrace {
  const AgentBenchOptions& o;
  const TeamDocsOptions& t;
  const ModelSpec& spec;
  std::vector<std::vector<int32_t>> library;
  std::vector<int32_t> invocation;
};

// The team's adapters of one kind, written under o.work_dir.
Result<std::vector<ServingOptions::AdapterSpec>> write_team_adapters(const TeamTrace& tr, const Model& model,
                                                                     const std::string& kind) {
  std::vector<ServingOptions::AdapterSpec> agents;
  for (int32_t i = 0; i < tr.t.n_agents; ++i) {
    SynthAdapterConfig c;
    c.seed = tr.o.seed + 300 + static_cast<uint64_t>(i);
    c.rank = tr.t.rank;
    if (kind == "alora") c.invocation_tokens = tr.invocation;
    const std::string dir = tr.o.work_dir + "/" + kind + "_" + std::to_string(i);
    AKV_ASSIGN_OR_RETURN(auto rep, synth_adapter_write(c, model, dir));
    (void)rep;
    agents.push_back({"agent" + std::to_string(i), dir, kind});
  }
  return agents;
}

// Agent i's prompt at a turn: the trajectory, its own retrieval (k documents
// in its own order), a question, and the invocation under aLoRA.
ServeRequest team_ask(const TeamTrace& tr, const std::vector<int32_t>& traj, const std::string& kind,
                      int32_t turn, int32_t i) {
  const TeamDocsOptions& t = tr.t;
  std::vector<int32_t> order(t.n_docs);
  for (int32_t d = 0; d < t.n_docs; ++d) order[d] = d;
  std::mt19937_64 rng(tr.o.seed + 3000 + static_cast<uint64_t>(turn * t.n_agents + i));
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int32_t> p = traj;
  for (int32_t k = 0; k < t.docs_per_agent; ++k)
    p.insert(p.end(), tr.library[order[k]].begin(), tr.library[order[k]].end());
  const std::vector<int32_t> q = random_prompt(16, tr.spec.n_vocab, tr.o.seed + 4000 + turn * t.n_agents + i);
  p.insert(p.end(), q.begin(), q.end());
  if (kind == "alora") p.insert(p.end(), tr.invocation.begin(), tr.invocation.end());
  return request(std::move(p), t.answer_tokens, "agent" + std::to_string(i));
}

// The trace on one engine: the base reads each document once, alone, behind
// a short header (retrieval); then each turn the agents answer together and
// the base extends the trajectory.
Status run_team_scheme(const TeamTrace& tr, ServingEngine& eng, const std::string& kind, TeamDocsResult* r) {
  const TeamDocsOptions& t = tr.t;
  const Clock::time_point t0 = Clock::now();
  std::vector<ServeRequest> reads;
  for (int32_t d = 0; d < t.n_docs; ++d) {
    std::vector<int32_t> p = random_prompt(4, tr.spec.n_vocab, tr.o.seed + 2000 + d);
    p.insert(p.end(), tr.library[d].begin(), tr.library[d].end());
    reads.push_back(request(std::move(p), 1, ""));
  }
  AKV_RETURN_IF_ERROR(first_error(run_together(eng, std::move(reads))));
  std::vector<int32_t> traj = random_prompt(t.context_tokens, tr.spec.n_vocab, tr.o.seed + 7);
  std::vector<Done> start = run_together(eng, {request(traj, t.base_tokens, "")});
  AKV_RETURN_IF_ERROR(first_error(start));
  traj.insert(traj.end(), start[0].tokens.begin(), start[0].tokens.end());
  std::vector<double> ttft;
  for (int32_t turn = 0; turn < t.turns; ++turn) {
    std::vector<ServeRequest> asks;
    for (int32_t i = 0; i < t.n_agents; ++i) asks.push_back(team_ask(tr, traj, kind, turn, i));
    std::vector<Done> answers = run_together(eng, std::move(asks));
    AKV_RETURN_IF_ERROR(first_error(answers));
    for (const Done& d : answers) {
      r->prompt_tokens += d.prompt_tokens;
      r->cached_tokens += d.cached;
      r->reused_tokens += d.reused;
      r->computed_entries += d.prefill_token_layers;
      ttft.push_back(d.ttft_s);
      traj.insert(traj.end(), d.tokens.begin(), d.tokens.end());
    }
    std::vector<Done> next = run_together(eng, {request(traj, t.base_tokens, "")});
    AKV_RETURN_IF_ERROR(first_error(next));
    traj.insert(traj.end(), next[0].tokens.begin(), next[0].tokens.end());
  }
  r->total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r->median_ttft_s = median(ttft);
  return Status::ok();
}

}  // namespace

Result<std::vector<TeamDocsResult>> run_team_docs(const AgentBenchOptions& o, const TeamDocsOptions& t) {
  if (t.docs_per_agent > t.n_docs) {
    return make_error(ErrorCode::kInvalidArgument, "--team-docs-per-agent (", t.docs_per_agent,
                      ") exceeds --team-docs (", t.n_docs, ")");
  }
  AKV_ASSIGN_OR_RETURN(LoadedModel lm, load_model_file(o.model_path, o.n_threads));
  const ModelSpec& spec = lm.model->spec;
  TeamTrace tr{o, t, spec, {}, lm.tokenizer->encode("<|im_start|>assistant\nAnswer:", false, true)};
  std::filesystem::create_directories(o.work_dir);
  for (int32_t d = 0; d < t.n_docs; ++d)
    tr.library.push_back(random_prompt(t.doc_tokens, spec.n_vocab, o.seed + 1000 + d));
  const int64_t longest =
      int64_t{t.context_tokens} + int64_t{t.turns} * (t.n_agents * t.answer_tokens + t.base_tokens) +
      int64_t{t.docs_per_agent} * t.doc_tokens + 64 + static_cast<int64_t>(tr.invocation.size());
  std::vector<TeamDocsResult> results;
  int round = 0;
  for (const std::string& kind : t.kinds) {
    AKV_ASSIGN_OR_RETURN(std::vector<ServingOptions::AdapterSpec> agents,
                         write_team_adapters(tr, *lm.model, kind));
    std::vector<std::string> schemes = {"none", kind, t.reuse, kind + "+" + t.reuse};
    std::rotate(schemes.begin(), schemes.begin() + (round++ % 4), schemes.end());  // who goes first rotates
    for (const std::string& scheme : schemes) {
      if (o.progress) o.progress("team-docs: " + kind + " agents under " + scheme);
      ServingOptions so = engine_options(o, spec, longest, t.n_docs + t.n_agents * (t.turns + 1) + 2, scheme);
      so.adapters = agents;
      AKV_ASSIGN_OR_RETURN(auto eng, create_serving_engine(so));
      TeamDocsResult r;
      r.kind = kind;
      r.scheme = scheme;
      r.n_layers = spec.n_layers;
      AKV_RETURN_IF_ERROR(run_team_scheme(tr, *eng, kind, &r));
      results.push_back(r);
    }
  }
  return results;
}

}  // namespace agentkv
