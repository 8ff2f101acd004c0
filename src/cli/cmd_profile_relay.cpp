// `agentkv profile-relay`: RelayCaching's offline layer profiler (paper
// §4.2, App. B.1). Runs the seeded summarize-then-answer calibration on the
// serving engine (src/bench/relay_profiler.h), prints s_l and rho_l per
// layer with the chosen l_start, l_det and l_end, and writes the profile
// JSON that `serve --relay-profile` and the benchmarks load.
#include <cmath>
#include <cstdio>

#include "bench/relay_profiler.h"
#include "cli/commands.h"
#include "cli/common.h"

namespace agentkv::cli {

namespace {

struct ProfileArgs {
  RelayProfilerOptions o;
  std::string out = "relay-profile.json";
};

void run(ProfileArgs& a) {
  a.o.progress = [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
  Result<RelayProfile> p = run_relay_profiler(a.o);
  if (!p.is_ok()) {
    std::fprintf(stderr, "error: %s\n", p.status().message().c_str());
    set_exit_code(1);
    return;
  }
  std::printf("| layer | s_l (V similarity) | rho_l (rank stability) | |\n|---|---|---|---|\n");
  for (int32_t l = 0; l < p->n_layers; ++l) {
    const char* mark = l == p->l_start ? "l_start" : l == p->l_det ? "l_det" : l == p->l_end ? "l_end" : "";
    if (std::isnan(p->rho[l])) {
      std::printf("| %d | %.5f | - | %s |\n", l, p->similarity[l], mark);
    } else {
      std::printf("| %d | %.5f | %.4f | %s |\n", l, p->similarity[l], p->rho[l], mark);
    }
  }
  std::printf("\nl_start %d, l_det %d, l_end %d (recomputed band [%d, %d)); %d samples, %lld reused tokens\n",
              p->l_start, p->l_det, p->l_end, p->l_start, p->l_end, p->samples, static_cast<long long>(p->tokens));
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
  cmd->callback([a] { run(*a); });
}

}  // namespace agentkv::cli
