// `agentkv bench-relay`: RelayCaching's multi-agent chain experiments (paper
// 003 §5: Table 2, Fig. 8, and an accuracy chain) on the serving engine, each
// KV-sharing scheme against `none` (full prefill). Prints Markdown tables;
// --json-out keeps the numbers for tools/plot_relay_chain.py.
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/common.h"
#include "workloads/relay_capture_overhead.h"
#include "workloads/relay_chain.h"
#include "workloads/scheme_spec.h"

namespace agentkv::cli {

namespace {

struct RelayArgs {
  RelayBenchOptions o;
  std::string workload = "ttft-chain";
  std::vector<std::string> schemes = {"none", "naive", "epic", "cacheblend:0.20", "relay"};
  std::optional<int32_t> gen_tokens;  // ttft-chain 1024, accuracy-chain 64
  int32_t reps = 3;
  TtftChainOptions ttft;
  ContextScalingOptions scaling;
  AccuracyChainOptions acc;
  CaptureOverheadOptions overhead;
  float temperature = 0.8f;
  int32_t prompt_tokens = 512;
  std::string json_out;
};

nlohmann::json cell_json(const ChainCell& c) {
  return {{"label", c.label},
          {"point", c.point},
          {"prompt_tokens", c.prompt_tokens},
          {"ttft_s", c.ttft_s},
          {"speedup", c.speedup},
          {"reused_tokens", c.reused_tokens},
          {"reuse_rate", c.reuse_rate},
          {"cached_tokens", c.cached_tokens}};
}

nlohmann::json runs_json(const ChainReport& r) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& rep : r.runs) {
    nlohmann::json jr = nlohmann::json::array();
    for (const auto& scheme : rep) {
      nlohmann::json js = nlohmann::json::array();
      for (const ChainAgentRun& a : scheme) {
        js.push_back({{"agent", a.agent},
                      {"prompt_tokens", a.prompt_tokens},
                      {"cached_tokens", a.cached_tokens},
                      {"reused_tokens", a.reused_tokens},
                      {"prefill_token_layers", a.prefill_token_layers},
                      {"ttft_s", a.ttft_s},
                      {"reuse_rate", a.reuse_rate}});
      }
      jr.push_back(js);
    }
    j.push_back(jr);
  }
  return j;
}

// The paper's layout (Table 2, Fig. 8): a row per scheme, a column per point,
// TTFT in ms with the speed-up over none; then every number per cell.
void print_chain(const ChainReport& r, const std::vector<SchemeSpec>& schemes, const char* point_name) {
  std::vector<int32_t> points;
  for (const ChainCell& c : r.cells) {
    if (points.empty() || points.back() != c.point) points.push_back(c.point);
  }
  std::map<std::pair<std::string, int32_t>, const ChainCell*> at;
  for (const ChainCell& c : r.cells) at[{c.label, c.point}] = &c;
  std::printf("\nTTFT, ms (speed-up over none), median\n\n| scheme |");
  for (int32_t p : points) std::printf(" %s %d |", point_name, p);
  std::printf("\n|---|");
  for (size_t i = 0; i < points.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (const SchemeSpec& s : schemes) {
    std::printf("| %s |", s.label.c_str());
    for (int32_t p : points) {
      const ChainCell* c = at[{s.label, p}];
      std::printf(" %.1f (%.2fx) |", 1000 * c->ttft_s, c->speedup);
    }
    std::printf("\n");
  }
  std::printf(
      "\n| %s | scheme | prompt tokens | TTFT ms | speed-up | reused tokens | reuse rate | prefix-cached |\n",
      point_name);
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const ChainCell& c : r.cells) {
    std::printf("| %d | %s | %d | %.1f | %.2fx | %.0f | %.1f%% | %.0f |\n", c.point, c.label.c_str(),
                c.prompt_tokens, 1000 * c.ttft_s, c.speedup, c.reused_tokens, 100 * c.reuse_rate,
                c.cached_tokens);
  }
}

void print_accuracy(const AccuracyReport& r) {
  std::printf(
      "\n| scheme | accuracy | correct | agent 1 alone | agent 2 alone | reuse rate (agents 2-3) | reused "
      "tokens / "
      "agent | prefix-cached / agent | final output = none's |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const AccuracyRow& row : r.rows) {
    std::printf("| %s | %.1f%% | %d/%d | %.1f%% | %.1f%% | %.1f%% | %.0f | %.0f | %.0f%% |\n",
                row.label.c_str(), 100 * row.accuracy, row.correct, row.instances, 100 * row.agent1_accuracy,
                100 * row.agent2_accuracy, 100 * row.reuse_rate, row.reused_tokens, row.cached_tokens,
                100 * row.agree_with_none);
  }
}

Status run_overhead(RelayArgs& a, nlohmann::json& j) {
  a.overhead.reps = a.reps;
  a.overhead.gen_tokens = a.gen_tokens.value_or(128);
  AKV_ASSIGN_OR_RETURN(std::vector<CaptureOverheadRow> rows, run_capture_overhead(a.o, a.overhead));
  std::printf(
      "\ncapture-overhead: decode of %d tokens (greedy), none against relay's captures, %d repetitions "
      "interleaved, %d threads\n\n| context | none ms/token | relay (captures) ms/token | overhead |\n"
      "|---|---|---|---|\n",
      a.overhead.gen_tokens, a.reps, a.o.n_threads);
  for (const CaptureOverheadRow& r : rows) {
    std::printf("| %d | %.2f | %.2f | %+.1f%% |\n", r.context, r.plain_ms, r.capture_ms, 100 * r.overhead);
    j["rows"].push_back({{"context", r.context},
                         {"plain_ms", r.plain_ms},
                         {"capture_ms", r.capture_ms},
                         {"overhead", r.overhead}});
  }
  return Status::ok();
}

Status run_accuracy(RelayArgs& a, nlohmann::json& j) {
  a.acc.gen_tokens = a.gen_tokens.value_or(64);
  AKV_ASSIGN_OR_RETURN(AccuracyReport rep, run_accuracy_chain(a.o, a.acc));
  std::printf(
      "\naccuracy-chain: %d instances of %d records, 3 agents, <= %d generated tokens each (greedy), "
      "concurrency %d, %d threads\n",
      a.acc.instances, a.acc.task.records, a.acc.gen_tokens, a.acc.concurrency, a.o.n_threads);
  print_accuracy(rep);
  j.update({{"instances", a.acc.instances},
            {"records", a.acc.task.records},
            {"gen_tokens", a.acc.gen_tokens},
            {"concurrency", a.acc.concurrency},
            {"n_layers", rep.n_layers}});
  for (const AccuracyRow& row : rep.rows) {
    j["rows"].push_back({{"label", row.label},
                         {"accuracy", row.accuracy},
                         {"correct", row.correct},
                         {"instances", row.instances},
                         {"reuse_rate", row.reuse_rate},
                         {"reused_tokens", row.reused_tokens},
                         {"cached_tokens", row.cached_tokens},
                         {"agree_with_none", row.agree_with_none},
                         {"agent1_accuracy", row.agent1_accuracy},
                         {"agent2_accuracy", row.agent2_accuracy}});
  }
  return Status::ok();
}

// ttft-chain and context-scaling: TTFT per point and scheme.
Status run_chains(RelayArgs& a, nlohmann::json& j) {
  ChainReport rep;
  if (a.workload == "ttft-chain") {
    a.ttft.gen_tokens = a.gen_tokens.value_or(1024);
    a.ttft.reps = a.reps;
    a.ttft.temperature = a.temperature;
    a.ttft.first_prompt_tokens = a.prompt_tokens;
    AKV_ASSIGN_OR_RETURN(rep, run_ttft_chain(a.o, a.ttft));
    std::printf(
        "\nttft-chain: %d agents, first prompt %d tokens, %d generated tokens per agent "
        "(temperature %.2f), %d repetitions, %d threads\n",
        a.ttft.agents, a.ttft.first_prompt_tokens, a.ttft.gen_tokens, a.temperature, a.reps, a.o.n_threads);
    print_chain(rep, a.o.schemes, "agent");
    j.update({{"agents", a.ttft.agents}, {"gen_tokens", a.ttft.gen_tokens}});
  } else {
    if (a.gen_tokens) {
      return make_error(ErrorCode::kInvalidArgument,
                        "--gen-tokens: context-scaling sets the outputs with --outputs");
    }
    a.scaling.reps = a.reps;
    a.scaling.temperature = a.temperature;
    a.scaling.first_prompt_tokens = a.prompt_tokens;
    AKV_ASSIGN_OR_RETURN(rep, run_context_scaling(a.o, a.scaling));
    std::printf(
        "\ncontext-scaling: 3 agents, first prompt %d tokens, agents 1 and 2 emit C/2 tokens each "
        "(temperature %.2f), TTFT of agent 3, %d repetitions, %d threads\n",
        a.scaling.first_prompt_tokens, a.temperature, a.reps, a.o.n_threads);
    print_chain(rep, a.o.schemes, "C");
    j["outputs"] = a.scaling.outputs;
  }
  j.update({{"prompt_tokens", a.prompt_tokens},
            {"reps", a.reps},
            {"temperature", a.temperature},
            {"n_layers", rep.n_layers}});
  for (const ChainCell& c : rep.cells) j["cells"].push_back(cell_json(c));
  j["runs"] = runs_json(rep);
  return Status::ok();
}

void run(RelayArgs a) {
  for (const std::string& spec : a.schemes) {
    auto s = parse_scheme_spec(spec);
    if (!s.is_ok()) return fail(s.status());
    a.o.schemes.push_back(*s);
  }
  a.o.progress = [](const std::string& s) { std::fprintf(stderr, "[bench-relay] %s\n", s.c_str()); };
  nlohmann::json j;
  j["workload"] = a.workload;
  j["model"] = a.o.model_path;
  j["threads"] = a.o.n_threads;
  j["seed"] = a.o.seed;
  j["schemes"] = a.schemes;
  const Status st = a.workload == "capture-overhead" ? run_overhead(a, j)
                    : a.workload == "accuracy-chain" ? run_accuracy(a, j)
                                                     : run_chains(a, j);
  if (!st.is_ok()) return fail(st);
  std::fflush(stdout);
  if (!a.json_out.empty()) {
    std::ofstream f(a.json_out);
    f << j.dump(2) << "\n";
    if (!f) return fail(make_error(ErrorCode::kIo, "--json-out: cannot write ", a.json_out));
  }
}

// The workloads' own flags (each names the workloads it applies to).
void add_workload_flags(CLI::App* cmd, RelayArgs* a) {
  cmd->add_option(
         "--gen-tokens", a->gen_tokens,
         "tokens each agent emits: ttft-chain exactly this many (default 1024), accuracy-chain at most "
         "(default 64, stops at end of generation)")
      ->check(CLI::Range(1, 8192));
  cmd->add_option("--reps", a->reps, "ttft-chain, context-scaling: repetitions (medians over them)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--agents", a->ttft.agents, "ttft-chain: agents in the chain (2-5)")
      ->capture_default_str()
      ->check(CLI::Range(2, 5));
  cmd->add_option("--prompt-tokens", a->prompt_tokens,
                  "ttft-chain, context-scaling: the first agent's prompt, exactly this many tokens")
      ->capture_default_str()
      ->check(CLI::Range(96, 8192));
  cmd->add_option("--outputs", a->scaling.outputs,
                  "context-scaling: cumulative outputs C of agents 1 and 2 (C/2 each), comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(2, 16384));
  cmd->add_option(
         "--temperature", a->temperature,
         "ttft-chain, context-scaling: sampling temperature of the forced-length outputs (seeded alike "
         "for every scheme; 0 = greedy)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 2.0));
  cmd->add_option("--contexts", a->overhead.contexts, "capture-overhead: prompt lengths decoded after, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(16, 8000));
  cmd->add_option("--instances", a->acc.instances, "accuracy-chain: task instances")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--concurrency", a->acc.concurrency, "accuracy-chain: instances in flight")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--records", a->acc.task.records, "accuracy-chain: records per document (the difficulty)")
      ->capture_default_str()
      ->check(CLI::Range(2, kRelayTaskMaxRecords));
  cmd->add_flag("--show-outputs", a->acc.show_outputs,
                "accuracy-chain: print every agent's output to stderr");
}

}  // namespace

void register_bench_relay(CLI::App& app) {
  auto a = std::make_shared<RelayArgs>();
  a->o.model_path = default_model_path();
  CLI::App* cmd = app.add_subcommand(
      "bench-relay",
      "RelayCaching's multi-agent chains (paper 003 §5) on the serving engine: TTFT per downstream agent "
      "(ttft-chain, Table 2), TTFT against the cumulative output (context-scaling, Fig. 8), and accuracy "
      "on a seeded 3-agent task (accuracy-chain), each scheme against none (full prefill)");
  cmd->add_option(
         "--workload", a->workload,
         "ttft-chain, context-scaling, accuracy-chain, or capture-overhead (decode under none against "
         "relay's captures)")
      ->check(CLI::IsMember({"ttft-chain", "context-scaling", "accuracy-chain", "capture-overhead"}))
      ->capture_default_str();
  cmd->add_option("-m,--model", a->o.model_path, "base model GGUF")->capture_default_str();
  cmd->add_option("-t,--threads", a->o.n_threads, "compute threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option(
         "--schemes", a->schemes,
         "schemes, comma-separated, 'none' (the reference) among them: SCHEME[:VALUE][:KEY=VALUE...] "
         "as bench-fidelity takes them (e.g. cacheblend:0.20, epic:16)")
      ->delimiter(',')
      ->capture_default_str();
  add_workload_flags(cmd, a.get());
  a->o.relay_profile = "profiles/smollm2-135m-instruct-q4_1.relay.json";
  cmd->add_option(
         "--relay-profile", a->o.relay_profile,
         "relay: the model's layer profile (agentkv profile-relay), loaded only when a scheme is relay; "
         "the default is SmolLM2-135M's committed one, '' for none")
      ->capture_default_str();
  cmd->add_option("--seed", a->o.seed, "seed of the prompts and tasks")->capture_default_str();
  cmd->add_option("--block-size", a->o.block_size, "KV block size")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  add_kv_dtype_option(cmd, &a->o.kv_dtype);
  cmd->add_option("--kv-cache-mb", a->o.kv_cache_mb, "KV pool, MiB (0: sized for the workload)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option(
         "--max-batch-tokens", a->o.max_batch_tokens,
         "token rows per step (the default keeps every prompt in one chunk, so a scheme selects over "
         "the whole prompt)")
      ->capture_default_str()
      ->check(CLI::Range(16, 65536));
  cmd->add_option("--json-out", a->json_out, "also write the results as JSON here");
  cmd->callback([a] { run(*a); });
}

}  // namespace agentkv::cli
