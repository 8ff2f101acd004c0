// The TTFT workloads of bench-relay: ttft-chain (paper 003, Table 2) and
// context-scaling (Fig. 8). Both run chains whose agents emit a forced number
// of tokens (ignore_eos) and measure the TTFT of the downstream agents; the
// last agent emits one token, since only its TTFT is measured.
#include "workloads/relay_chain.h"

#include <algorithm>
#include <cstdio>

#include "tokenizer/tokenizer.h"
#include "util/stats.h"
#include "workloads/relay_chain_engine.h"
#include "workloads/relay_chain_prompt.h"

namespace agentkv {

namespace {

struct ChainShape {
  std::vector<int32_t> body;  // the question, shared by every agent
  std::vector<int32_t> gens;  // tokens each agent emits; the last one's is 1
};

std::vector<int32_t> agent_prompt(const ChainPromptBuilder& b, const ChainShape& c, size_t a,
                                  const std::vector<ChainUpstream>& upstream) {
  const ChainRole& r = chain_agent_roles()[a];
  return b.build(r.role, c.body, upstream, r.suffix);
}

// The body that makes the first agent's prompt exactly `first` tokens.
Result<std::vector<int32_t>> first_body(const Tokenizer& tok, const ChainPromptBuilder& b, uint64_t seed,
                                        int32_t first) {
  const ChainRole& r = chain_agent_roles()[0];
  const int32_t frame = static_cast<int32_t>(b.head(r.role).size() + b.tail(r.suffix).size());
  if (first < frame + 64) {
    return make_error(ErrorCode::kInvalidArgument, "--prompt-tokens ", first, " is shorter than ", frame + 64,
                      " (the first agent's role, suffix and a 64-token question)");
  }
  return chain_question_body(tok, seed, first - frame);
}

// Every agent's prompt and generation fit the context, and the pool holds the
// chain; returns the tokens the chain keeps (all its sequences).
Result<int64_t> check_fits(const ChainPromptBuilder& b, const ChainShape& c, int32_t max_model_len) {
  std::vector<ChainUpstream> up;
  int64_t total = 0;
  for (size_t a = 0; a < c.gens.size(); ++a) {
    const int64_t seq = static_cast<int64_t>(agent_prompt(b, c, a, up).size()) + c.gens[a];
    if (seq > max_model_len) {
      return make_error(ErrorCode::kInvalidArgument, "agent ", a + 1, " needs ", seq,
                        " tokens of context (prompt + generation), over the model's ", max_model_len,
                        ": lower --gen-tokens, --outputs or --prompt-tokens");
    }
    total += seq;
    up.push_back({chain_agent_roles()[a].label, std::vector<int32_t>(static_cast<size_t>(c.gens[a]), 0)});
  }
  return total;
}

// Runs one chain under `scheme` in namespace `salt`; returns the runs of the
// agents from `first_measured` (0-based) on.
Result<std::vector<ChainAgentRun>> run_chain(const RelayBenchOptions& o, RelayEngine& re,
                                             const ChainPromptBuilder& b, const ChainShape& c,
                                             const SchemeSpec& scheme, const std::string& salt,
                                             float temperature, uint64_t sample_seed, size_t first_measured,
                                             const std::string& what) {
  std::vector<ChainUpstream> up;
  std::vector<ChainAgentRun> measured;
  for (size_t a = 0; a < c.gens.size(); ++a) {
    ServeRequest req = chain_request(agent_prompt(b, c, a, up), scheme, salt, c.gens[a]);
    req.ignore_eos = true;
    req.sampling.temperature = temperature;
    req.sampling.seed = sample_seed + a;
    const int32_t agent = static_cast<int32_t>(a + 1);
    AKV_ASSIGN_OR_RETURN(ChainAgentRun run, chain_run_agent(*re.engine, std::move(req), agent, re.n_layers));
    if (run.completion_tokens != c.gens[a]) {
      return make_error(ErrorCode::kInternal, what, " agent ", agent, " emitted ", run.completion_tokens,
                        " tokens, not ", c.gens[a]);
    }
    if (o.progress) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "%s agent %d/%zu: %d prompt tokens, TTFT %.3f s, reused %d, reuse %.1f%%", what.c_str(),
                    agent, c.gens.size(), run.prompt_tokens, run.ttft_s, run.reused_tokens,
                    100 * run.reuse_rate);
      o.progress(line);
    }
    up.push_back({chain_agent_roles()[a].label, run.tokens});
    if (a >= first_measured) {
      run.tokens.clear();  // the report keeps numbers, not the text
      run.text.clear();
      measured.push_back(std::move(run));
    }
  }
  return measured;
}

// One request before timing anything: first-touch of the weights and pool.
Status warm_up(RelayEngine& re, const ChainPromptBuilder& b, const ChainShape& c) {
  ServeRequest req = chain_request(agent_prompt(b, c, 0, {}), SchemeSpec{"none", "none", {}}, "warm-up", 8);
  return chain_run_agent(*re.engine, std::move(req), 1, re.n_layers).status();
}

ChainCell make_cell(const std::string& label, int32_t point, const std::vector<const ChainAgentRun*>& runs) {
  ChainCell cell;
  cell.label = label;
  cell.point = point;
  std::vector<double> prompt, ttft, reused, reuse, cached;
  for (const ChainAgentRun* r : runs) {
    prompt.push_back(r->prompt_tokens);
    ttft.push_back(r->ttft_s);
    reused.push_back(r->reused_tokens);
    reuse.push_back(r->reuse_rate);
    cached.push_back(r->cached_tokens);
  }
  cell.prompt_tokens = static_cast<int32_t>(median(prompt));
  cell.ttft_s = median(ttft);
  cell.reused_tokens = median(reused);
  cell.reuse_rate = median(reuse);
  cell.cached_tokens = median(cached);
  return cell;
}

// Cells for measured point p of every scheme, from report.runs.
void add_cells(const RelayBenchOptions& o, ChainReport& rep, size_t p, int32_t point, size_t rep_begin) {
  const size_t none = chain_none_index(o);
  const size_t first = rep.cells.size();
  for (size_t k = 0; k < o.schemes.size(); ++k) {
    std::vector<const ChainAgentRun*> runs;
    for (size_t r = rep_begin; r < rep.runs.size(); ++r) runs.push_back(&rep.runs[r][k][p]);
    rep.cells.push_back(make_cell(o.schemes[k].label, point, runs));
  }
  const double ref = rep.cells[first + none].ttft_s;
  for (size_t k = 0; k < o.schemes.size(); ++k) {
    ChainCell& cell = rep.cells[first + k];
    cell.speedup = cell.ttft_s > 0 ? ref / cell.ttft_s : 0;
  }
}

}  // namespace

Result<ChainReport> run_ttft_chain(const RelayBenchOptions& o, const TtftChainOptions& t) {
  const int32_t max_agents = static_cast<int32_t>(chain_agent_roles().size());
  if (t.agents < 2 || t.agents > max_agents) {
    return make_error(ErrorCode::kInvalidArgument, "--agents must be in [2, ", max_agents, "]");
  }
  AKV_ASSIGN_OR_RETURN(RelayEngine probe, relay_engine_create(o, 4096));
  const ChainPromptBuilder b0(probe.engine->tokenizer());
  ChainShape c;
  c.gens.assign(static_cast<size_t>(t.agents), t.gen_tokens);
  c.gens.back() = 1;
  AKV_ASSIGN_OR_RETURN(c.body, first_body(probe.engine->tokenizer(), b0, o.seed, t.first_prompt_tokens));
  AKV_ASSIGN_OR_RETURN(const int64_t chain_tokens, check_fits(b0, c, probe.engine->max_model_len()));
  probe.engine.reset();
  // Two chains' worth: the one running and the previous one, still cached.
  AKV_ASSIGN_OR_RETURN(RelayEngine re, relay_engine_create(o, 2 * chain_tokens + 4096));
  const ChainPromptBuilder b(re.engine->tokenizer());
  AKV_RETURN_IF_ERROR(warm_up(re, b, c));
  ChainReport rep;
  rep.n_layers = re.n_layers;
  for (int32_t r = 0; r < t.reps; ++r) {
    AKV_ASSIGN_OR_RETURN(c.body, first_body(re.engine->tokenizer(), b, o.seed + static_cast<uint64_t>(r),
                                            t.first_prompt_tokens));
    rep.runs.emplace_back();
    for (size_t k = 0; k < o.schemes.size(); ++k) {
      const std::string what =
          "ttft-chain rep " + std::to_string(r + 1) + "/" + std::to_string(t.reps) + " " + o.schemes[k].label;
      const std::string salt = "relay-chain/" + std::to_string(r) + "/" + std::to_string(k);
      AKV_ASSIGN_OR_RETURN(auto runs, run_chain(o, re, b, c, o.schemes[k], salt, t.temperature,
                                                o.seed * 1000003 + static_cast<uint64_t>(r) * 100, 1, what));
      rep.runs.back().push_back(std::move(runs));
    }
  }
  for (int32_t a = 2; a <= t.agents; ++a) add_cells(o, rep, static_cast<size_t>(a - 2), a, 0);
  return rep;
}

Result<ChainReport> run_context_scaling(const RelayBenchOptions& o, const ContextScalingOptions& cs) {
  if (cs.outputs.empty()) return make_error(ErrorCode::kInvalidArgument, "--outputs: no length given");
  for (int32_t out : cs.outputs) {
    if (out < 2 || out % 2)
      return make_error(ErrorCode::kInvalidArgument, "--outputs: ", out, " is not even and >= 2");
  }
  AKV_ASSIGN_OR_RETURN(RelayEngine probe, relay_engine_create(o, 4096));
  const ChainPromptBuilder b0(probe.engine->tokenizer());
  ChainShape c;
  AKV_ASSIGN_OR_RETURN(c.body, first_body(probe.engine->tokenizer(), b0, o.seed, cs.first_prompt_tokens));
  int64_t most = 0;
  for (int32_t out : cs.outputs) {
    c.gens = {out / 2, out / 2, 1};
    AKV_ASSIGN_OR_RETURN(const int64_t n, check_fits(b0, c, probe.engine->max_model_len()));
    most = std::max(most, n);
  }
  probe.engine.reset();
  AKV_ASSIGN_OR_RETURN(RelayEngine re, relay_engine_create(o, 2 * most + 4096));
  const ChainPromptBuilder b(re.engine->tokenizer());
  AKV_RETURN_IF_ERROR(warm_up(re, b, c));
  ChainReport rep;
  rep.n_layers = re.n_layers;
  for (size_t p = 0; p < cs.outputs.size(); ++p) {
    const int32_t out = cs.outputs[p];
    c.gens = {out / 2, out / 2, 1};
    const size_t rep_begin = rep.runs.size();
    for (int32_t r = 0; r < cs.reps; ++r) {
      AKV_ASSIGN_OR_RETURN(c.body, first_body(re.engine->tokenizer(), b, o.seed + static_cast<uint64_t>(r),
                                              cs.first_prompt_tokens));
      rep.runs.emplace_back();
      for (size_t k = 0; k < o.schemes.size(); ++k) {
        const std::string what = "context-scaling C=" + std::to_string(out) + " rep " +
                                 std::to_string(r + 1) + "/" + std::to_string(cs.reps) + " " +
                                 o.schemes[k].label;
        const std::string salt =
            "relay-scaling/" + std::to_string(out) + "/" + std::to_string(r) + "/" + std::to_string(k);
        AKV_ASSIGN_OR_RETURN(auto runs,
                             run_chain(o, re, b, c, o.schemes[k], salt, cs.temperature,
                                       o.seed * 1000003 + static_cast<uint64_t>(r) * 100, 2, what));
        rep.runs.back().push_back(std::move(runs));
      }
    }
    add_cells(o, rep, 0, out, rep_begin);
  }
  return rep;
}

}  // namespace agentkv
