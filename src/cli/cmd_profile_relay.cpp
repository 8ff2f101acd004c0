// `agentkv profile-relay`: RelayCaching's offline layer profiler (paper
// §4.2, App. B.1). Runs the seeded summarize-then-answer calibration on the
// serving engine (src/workloads/relay_profiler.h), prints s_l and rho_l per
// layer with the chosen l_start, l_det and l_end, and writes the profile
// JSON that `serve --relay-profile` and the benchmarks load.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "workloads/relay_bootstrap.h"
#include "workloads/relay_profiler.h"

namespace agentkv::cli {

namespace {

struct ProfileArgs {
  RelayProfilerOptions o;
  std::string out = "relay-profile.json";
  std::string chains_out;
  int32_t bootstrap = 1000;
  uint64_t bootstrap_seed = 1;
};

// Each reading of the rules, on all chains and over the resamples.
void print_bootstrap(const ProfileArgs& a, const std::vector<RelaySampleStats>& samples) {
  auto spread = relay_bootstrap(samples, a.o.rules, a.bootstrap, a.bootstrap_seed);
  if (!spread.is_ok()) return fail(spread.status());
  std::printf(
      "\nbootstrap: %d resamples of the %zu chains (seed %llu); 95%% = the 2.5%% and 97.5%% quantiles\n\n",
      a.bootstrap, samples.size(), static_cast<unsigned long long>(a.bootstrap_seed));
  std::printf(
      "| l_det rule | l_end rule | l_start | l_det | l_det 95%% | resamples at l_det | l_end | l_end 95%% | "
      "resamples at l_end |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const RelayRuleSpread& r : *spread) {
    std::printf("| %s | %s | %d | %d | [%d, %d] | %.0f%% | %d | [%d, %d] | %.0f%% |\n", r.det_rule.c_str(),
                r.end_rule.c_str(), r.all.l_start, r.all.l_det, layer_quantile(r.l_det, 0.025),
                layer_quantile(r.l_det, 0.975), 100 * layer_share(r.l_det, r.all.l_det), r.all.l_end,
                layer_quantile(r.l_end, 0.025), layer_quantile(r.l_end, 0.975),
                100 * layer_share(r.l_end, r.all.l_end));
  }
}

void run(ProfileArgs& a) {
  a.o.progress = [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
  Result<RelayCalibration> cal = run_relay_profiler(a.o);
  if (!cal.is_ok()) {
    std::fprintf(stderr, "error: %s\n", cal.status().message().c_str());
    set_exit_code(1);
    return;
  }
  const RelayProfile* p = &cal->profile;
  std::printf("| layer | s_l (V similarity) | rho_l (rank stability) | |\n|---|---|---|---|\n");
  for (int32_t l = 0; l < p->n_layers; ++l) {
    const char* mark = l == p->l_start ? "l_start" : l == p->l_det ? "l_det" : l == p->l_end ? "l_end" : "";
    if (std::isnan(p->rho[l])) {
      std::printf("| %d | %.5f | - | %s |\n", l, p->similarity[l], mark);
    } else {
      std::printf("| %d | %.5f | %.4f | %s |\n", l, p->similarity[l], p->rho[l], mark);
    }
  }
  std::printf(
      "\nl_start %d, l_det %d, l_end %d (recomputed band [%d, %d)); %d samples, %lld reused tokens; rules: "
      "l_det %s, "
      "l_end %s\n",
      p->l_start, p->l_det, p->l_end, p->l_start, p->l_end, p->samples, static_cast<long long>(p->tokens),
      p->rules.det_rule.c_str(), p->rules.end_rule.c_str());
  if (cal->lost > 0) {
    std::printf("%d of %d chains found no reused token and are left out\n", cal->lost, a.o.samples);
  }
  if (a.bootstrap > 0) print_bootstrap(a, cal->samples);
  if (!a.chains_out.empty()) {
    std::ofstream f(a.chains_out);
    for (size_t k = 0; k < cal->chains.size(); ++k) {
      const RelayChain& c = cal->chains[k];
      const RelaySampleStats& st = cal->samples[k];
      std::vector<double> similarity;
      for (double x : st.sim_sum)
        similarity.push_back(x / static_cast<double>(std::max<int64_t>(st.tokens, 1)));
      f << nlohmann::json{{"prompt1", c.prompt1},     {"summary", c.summary},
                          {"prompt2", c.prompt2},     {"summary_at", c.summary_at},
                          {"positions", c.positions}, {"similarity", similarity}}
               .dump()
        << "\n";
    }
    if (!f) return fail(make_error(ErrorCode::kIo, "--chains-out: cannot write ", a.chains_out));
  }
  const Status st = save_relay_profile(*p, a.out);
  if (!st.is_ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    set_exit_code(1);
    return;
  }
  std::fprintf(stderr, "wrote %s (tools/plot_relay_profile.py plots it)\n", a.out.c_str());
}

}  // namespace

void register_profile_relay(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  a->o.model_path = default_model_path();
  CLI::App* cmd = app.add_subcommand(
      "profile-relay",
      "RelayCaching's layer profiler: compares an upstream agent's decode-phase V with the downstream prompt's full "
      "prefill per layer on a seeded summarize-then-answer chain, and writes the relay layers (l_start, l_det, "
      "l_end) for serve --relay-profile");
  cmd->add_option("-m,--model", a->o.model_path, "base model GGUF")->capture_default_str();
  cmd->add_option("-t,--threads", a->o.n_threads, "compute threads")->capture_default_str();
  cmd->add_option("-o,--out", a->out, "profile JSON to write")->capture_default_str();
  cmd->add_option("--samples", a->o.samples, "calibration chains (the paper ran 200)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--doc-tokens", a->o.doc_tokens, "tokens of each document agent 1 summarizes")
      ->capture_default_str()
      ->check(CLI::Range(64, 6000));
  cmd->add_option("--gen-tokens", a->o.gen_tokens, "tokens agent 1 generates at most (the paper: 512)")
      ->capture_default_str()
      ->check(CLI::Range(32, 2048));
  cmd->add_option("--seed", a->o.seed, "seed of the calibration documents")->capture_default_str();
  cmd->add_option("--tau", a->o.rules.tau, "similarity of the unchanged first layers (tau_st)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--tail-layers", a->o.rules.tail_layers, "last layers that set the recovered baseline (T)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--lambda", a->o.rules.lambda, "stable steps are below lambda x sigma of the tail")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--stable-layers", a->o.rules.stable_layers, "consecutive stable layers after l_end (C)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option(
         "--det-rule", a->o.rules.det_rule,
         "l_det where alpha (rho's second difference) first turns from positive to negative (flip, the "
         "paper's words) or first is negative (onset of deceleration); they differ when alpha starts "
         "negative")
      ->check(CLI::IsMember({"flip", "onset"}))
      ->capture_default_str();
  cmd->add_option(
         "--end-rule", a->o.rules.end_rule,
         "l_end's dip: the least similar layer from l_start on (literal) or before the last T layers "
         "(before-tail); they differ when the minimum lies in the tail")
      ->check(CLI::IsMember({"literal", "before-tail"}))
      ->capture_default_str();
  cmd->add_option(
      "--chains-out", a->chains_out,
      "also write each chain here, one JSON object a line: both prompts, the summary, the positions "
      "compared and the per-layer similarity (tests/python/test_relay_profile_ref.py checks them "
      "against the numpy reference)");
  cmd->add_option("--bootstrap", a->bootstrap,
                  "resamples of the chains (with replacement) for the spread of l_det and l_end under each "
                  "reading of the rules; 0: none")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--bootstrap-seed", a->bootstrap_seed, "seed of the resampling")->capture_default_str();
  cmd->callback([a] { run(*a); });
}

}  // namespace agentkv::cli
