// `agentkv bench-agents`: the multi-agent workloads of the papers on the
// serving engine, each sharing scheme against `none` on the same trace.
// Prints Markdown tables; --json-out keeps the numbers for
// tools/plot_bench_agents.py.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "util/stats.h"
#include "workloads/agent_workloads.h"
#include "workloads/engine_requests.h"
#include "workloads/lragent_trace.h"

namespace agentkv::cli {

namespace {

struct AgentsArgs {
  AgentBenchOptions o;
  std::string workload = "alora-pipeline";
  PipelineOptions pipe;
  RoundRobinOptions rr;
  LragentTraceOptions trace;
  TeamDocsOptions team;
  std::string json_out;
};

void print_pipeline(const std::vector<PipelineResult>& rs, nlohmann::json* j) {
  std::printf("\n| prompt L | variant | adapter TTFT s | adapter e2e s | adapter cached | base 2nd TTFT s | base 2nd cached | base 1st TTFT s |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const PipelineResult& r : rs) {
    std::printf("| %d | %s | %.3f | %.3f | %.0f%% | %.3f | %.0f%% | %.3f |\n", r.prompt_len, r.variant.c_str(),
                r.adapter_ttft_s, r.adapter_e2e_s, 100 * r.adapter_cached, r.base2_ttft_s, 100 * r.base2_cached,
                r.base_ttft_s);
    (*j)["pipeline"].push_back({{"prompt_len", r.prompt_len}, {"variant", r.variant}, {"adapter_ttft_s", r.adapter_ttft_s},
                                {"adapter_e2e_s", r.adapter_e2e_s}, {"adapter_cached", r.adapter_cached},
                                {"base2_ttft_s", r.base2_ttft_s}, {"base2_cached", r.base2_cached},
                                {"base_ttft_s", r.base_ttft_s}});
  }
  std::printf("\n| prompt L | adapter TTFT speed-up | adapter e2e speed-up | base 2nd TTFT speed-up |\n|---|---|---|---|\n");
  for (const PipelineResult& a : rs) {
    if (a.variant != "alora") continue;
    for (const PipelineResult& n : rs) {
      if (n.prompt_len != a.prompt_len || n.variant == "alora") continue;
      std::printf("| %d | %.1fx | %.1fx | %.1fx |\n", a.prompt_len, n.adapter_ttft_s / a.adapter_ttft_s,
                  n.adapter_e2e_s / a.adapter_e2e_s, n.base2_ttft_s / a.base2_ttft_s);
    }
  }
}

void print_round_robin(const std::vector<RoundRobinResult>& rs, nlohmann::json* j) {
  std::printf("\n| scheme | prompt tokens | computed | KV blocks | KV MiB | median TTFT s | total s |\n|---|---|---|---|---|---|---|\n");
  for (const RoundRobinResult& r : rs) {
    std::printf("| %s | %lld | %lld | %d | %.1f | %.3f | %.2f |\n", r.scheme.c_str(), static_cast<long long>(r.prompt_tokens),
                static_cast<long long>(r.computed_tokens), r.kv_blocks, r.kv_mib, r.median_ttft_s, r.total_s);
    (*j)["round_robin"].push_back({{"scheme", r.scheme}, {"prompt_tokens", r.prompt_tokens},
                                   {"computed_tokens", r.computed_tokens}, {"kv_blocks", r.kv_blocks},
                                   {"kv_mib", r.kv_mib}, {"median_ttft_s", r.median_ttft_s}, {"total_s", r.total_s}});
  }
  if (rs.size() == 2) {
    std::printf("\nicarus / none: computed prefill tokens %.2f, KV memory %.2f, total time %.2f\n",
                double(rs[0].computed_tokens) / double(rs[1].computed_tokens),
                double(rs[0].kv_blocks) / double(rs[1].kv_blocks), rs[0].total_s / rs[1].total_s);
  }
}

// Per (L_ctx, scheme) the medians over repetitions, and each against none.
void print_lragent_trace(const std::vector<LragentTraceResult>& rs, const std::vector<std::string>& schemes,
                         nlohmann::json* j) {
  for (const LragentTraceResult& r : rs) {
    (*j)["lragent_trace"].push_back({{"ctx_len", r.ctx_len}, {"scheme", r.scheme}, {"rep", r.rep},
                                     {"ttft_sum_s", r.ttft_sum_s}, {"e2e_s", r.e2e_s},
                                     {"total_tokens", r.total_tokens}, {"throughput", r.throughput()},
                                     {"computed_rows", r.computed_rows}, {"peak_kv_bytes", r.peak_kv_bytes}});
  }
  std::vector<int32_t> lens;
  for (const LragentTraceResult& r : rs) {
    if (std::find(lens.begin(), lens.end(), r.ctx_len) == lens.end()) lens.push_back(r.ctx_len);
  }
  struct Med {
    double ttft = 0, tput = 0, mib = 0, rows = 0;
  };
  auto med = [&](int32_t L, const std::string& s) {
    std::vector<double> a, b, c, d;
    for (const LragentTraceResult& r : rs) {
      if (r.ctx_len != L || r.scheme != s) continue;
      a.push_back(r.ttft_sum_s), b.push_back(r.throughput()), c.push_back(double(r.peak_kv_bytes) / (1 << 20));
      d.push_back(double(r.computed_rows));
    }
    return Med{median(a), median(b), median(c), median(d)};
  };
  // Without a `none` run there is nothing to divide by: "-", not 0.00x.
  auto ratio = [](double num, double den) {
    if (!(den > 0 && num > 0)) return std::string("-");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2fx", num / den);
    return std::string(buf);
  };
  std::printf("\n| L_ctx | tokens | scheme | TTFT sum s | throughput tok/s | peak KV MiB | prefill rows | TTFT vs none | "
              "throughput vs none | KV vs none |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (int32_t L : lens) {
    const Med none = med(L, "none");
    for (const std::string& s : schemes) {
      const Med m = med(L, s);
      if (m.tput == 0) continue;
      std::printf("| %d | %d | %s | %.2f | %.1f | %.1f | %.0f | %s | %s | %s |\n", L, 912 + 4 * L, s.c_str(), m.ttft,
                  m.tput, m.mib, m.rows, ratio(none.ttft, m.ttft).c_str(), ratio(m.tput, none.tput).c_str(),
                  ratio(m.mib, none.mib).c_str());
    }
    const Med lr = med(L, "lragent-baselr");
    if (lr.rows > 0 && none.rows > 0) {
      std::printf("| %d | | token bound (none's prefill rows / lragent-baselr's) | | | | | %.2fx | | |\n", L,
                  none.rows / lr.rows);
    }
  }
}

// Per kind: each scheme's counts, and the composition against each of the others.
void print_team_docs(const std::vector<TeamDocsResult>& rs, nlohmann::json* j) {
  std::printf(
      "\n| agents | scheme | prompt tokens | prefix-cached | segment-reused | computed (token x layer / "
      "layers) | "
      "median TTFT s | trace s |\n|---|---|---|---|---|---|---|---|\n");
  for (const TeamDocsResult& r : rs) {
    const double computed = double(r.computed_entries) / std::max(1, r.n_layers);
    std::printf("| %s | %s | %lld | %lld | %lld | %.0f | %.3f | %.2f |\n", r.kind.c_str(), r.scheme.c_str(),
                static_cast<long long>(r.prompt_tokens), static_cast<long long>(r.cached_tokens),
                static_cast<long long>(r.reused_tokens), computed, r.median_ttft_s, r.total_s);
    (*j)["team_docs"].push_back({{"kind", r.kind},
                                 {"scheme", r.scheme},
                                 {"prompt_tokens", r.prompt_tokens},
                                 {"cached_tokens", r.cached_tokens},
                                 {"reused_tokens", r.reused_tokens},
                                 {"computed_entries", r.computed_entries},
                                 {"n_layers", r.n_layers},
                                 {"median_ttft_s", r.median_ttft_s},
                                 {"total_s", r.total_s}});
  }
  std::printf(
      "\n| agents | composed | against | computed: composed / other | median TTFT: other / composed |\n"
      "|---|---|---|---|---|\n");
  for (const TeamDocsResult& c : rs) {
    if (c.scheme.find('+') == std::string::npos) continue;
    for (const TeamDocsResult& o : rs) {
      if (o.kind != c.kind || &o == &c || o.computed_entries == 0 || c.median_ttft_s <= 0) continue;
      std::printf("| %s | %s | %s | %.2f | %.2fx |\n", c.kind.c_str(), c.scheme.c_str(), o.scheme.c_str(),
                  double(c.computed_entries) / double(o.computed_entries), o.median_ttft_s / c.median_ttft_s);
    }
  }
}

void run(AgentsArgs a) {
  if (a.o.work_dir.empty()) {
    a.o.work_dir = (std::filesystem::temp_directory_path() / ("agentkv_bench_agents_" + std::to_string(::getpid()))).string();
  }
  a.o.progress = [](const std::string& s) {
    std::fprintf(stderr, "[bench-agents] %s\n", s.c_str());
  };
  nlohmann::json j;
  j["model"] = a.o.model_path;
  j["threads"] = a.o.n_threads;
  Status st;
  if (a.workload == "alora-pipeline") {
    auto r = run_alora_pipeline(a.o, a.pipe);
    if (r.is_ok()) print_pipeline(*r, &j);
    st = r.status();
  } else if (a.workload == "icarus-round-robin") {
    auto r = run_icarus_round_robin(a.o, a.rr);
    if (r.is_ok()) print_round_robin(*r, &j);
    st = r.status();
  } else if (a.workload == "lragent-trace") {
    auto r = run_lragent_trace(a.o, a.trace);
    if (r.is_ok()) print_lragent_trace(*r, a.trace.schemes, &j);
    st = r.status();
  } else if (a.workload == "team-docs") {
    auto r = run_team_docs(a.o, a.team);
    if (r.is_ok()) print_team_docs(*r, &j);
    st = r.status();
  } else {
    st = make_error(ErrorCode::kInvalidArgument, "unknown --workload '", a.workload, "'");
  }
  std::filesystem::remove_all(a.o.work_dir);
  if (!st.is_ok()) return fail(st);
  if (!a.json_out.empty()) std::ofstream(a.json_out) << j.dump(2) << "\n";
}

}  // namespace

void register_bench_agents(CLI::App& app) {
  auto a = std::make_shared<AgentsArgs>();
  a->o.model_path = default_model_path();
  CLI::App* cmd = app.add_subcommand(
      "bench-agents", "Multi-agent workloads from the papers: each sharing scheme against `none` on the same trace");
  cmd->add_option(
         "--workload", a->workload,
         "alora-pipeline (paper 004 Sec. 4), icarus-round-robin (paper 001), lragent-trace (paper 000 "
         "App. C.5) or team-docs (a team of adapters reading retrieved documents: an exact adapter scheme "
         "composed with segment reuse, against each alone and none)")
      ->capture_default_str();
  cmd->add_option("-m,--model", a->o.model_path, "base model GGUF")->capture_default_str();
  cmd->add_option("-t,--threads", a->o.n_threads, "compute threads")->capture_default_str();
  cmd->add_option("--block-size", a->o.block_size, "KV block size")->capture_default_str();
  add_kv_dtype_option(cmd, &a->o.kv_dtype);
  cmd->add_option("--max-batch-tokens", a->o.max_batch_tokens, "token rows per step")->capture_default_str();
  cmd->add_option("--seed", a->o.seed, "seed of the prompts and adapters")->capture_default_str();
  cmd->add_option("--prompt-lens", a->pipe.prompt_lens, "alora-pipeline: initial prompt lengths")->delimiter(',');
  cmd->add_option("--base-tokens", a->pipe.base_tokens, "alora-pipeline: base answer length")->capture_default_str();
  cmd->add_option("--adapter-tokens", a->pipe.adapter_tokens, "alora-pipeline: evaluation length")->capture_default_str();
  cmd->add_option("--adapters", a->pipe.n_adapters, "alora-pipeline: evaluating adapters, invoked in parallel")
      ->capture_default_str();
  cmd->add_option("--agents", a->rr.n_agents, "icarus-round-robin: agents taking turns")->capture_default_str();
  cmd->add_option("--turns", a->rr.turns, "icarus-round-robin: turns")->capture_default_str();
  cmd->add_option("--start-len", a->rr.prompt_len, "icarus-round-robin: trajectory length at the start")
      ->capture_default_str();
  cmd->add_option("--turn-tokens", a->rr.turn_tokens, "icarus-round-robin: tokens generated per turn")
      ->capture_default_str();
  cmd->add_option("--ctx-lens", a->trace.ctx_lens, "lragent-trace: the trace's L_ctx values")->delimiter(',');
  cmd->add_option("--schemes", a->trace.schemes,
                  "lragent-trace: schemes, in the order of the first repetition; NAME+noflash attends over "
                  "expanded V instead of Flash-LoRA-Attention")
      ->delimiter(',');
  cmd->add_option("--reps", a->trace.reps, "lragent-trace: repetitions (schemes interleaved in each)")
      ->capture_default_str();
  cmd->add_option("--adapter-dir", a->trace.adapter_dir,
                  "lragent-trace: a folder with plan/, action/ and reflect/ PEFT adapters (default: random ones, q "
                  "and v, r 8, one shared A)");
  cmd->add_option("--critical-layers", a->trace.critical_layers, "lragent-trace: droidspeak's critical layers")
      ->delimiter(',');
  a->trace.droidspeak_profile = default_droidspeak_profile();
  cmd->add_option("--droidspeak-profile", a->trace.droidspeak_profile,
                  "lragent-trace: droidspeak's critical layers from this profile (default: the committed one for "
                  "SmolLM2 when it exists)");
  cmd->add_option("--team-kinds", a->team.kinds,
                  "team-docs: the agents' adapter kinds, each a trace (alora, icarus)")
      ->delimiter(',')
      ->check(CLI::IsMember({"alora", "icarus"}));
  cmd->add_option("--team-reuse", a->team.reuse, "team-docs: the segment-reuse scheme")
      ->check(CLI::IsMember({"naive", "epic", "cacheblend", "sparsex"}))
      ->capture_default_str();
  cmd->add_option("--team-agents", a->team.n_agents, "team-docs: agents, run together each turn")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--team-docs", a->team.n_docs, "team-docs: documents in the library")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--team-doc-tokens", a->team.doc_tokens, "team-docs: tokens per document")
      ->check(CLI::Range(16, 8192))
      ->capture_default_str();
  cmd->add_option("--team-docs-per-agent", a->team.docs_per_agent,
                  "team-docs: documents each agent retrieves per turn")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--team-context", a->team.context_tokens, "team-docs: the trajectory's start, tokens")
      ->check(CLI::Range(1, 16384))
      ->capture_default_str();
  cmd->add_option("--team-turns", a->team.turns, "team-docs: turns")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--json-out", a->json_out, "also write the results as JSON here");
  cmd->callback([a] { run(*a); });
}

}  // namespace agentkv::cli
