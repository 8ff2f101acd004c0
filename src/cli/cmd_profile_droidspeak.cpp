// `agentkv profile-droidspeak`: DroidSpeak's critical layers for a model and
// a team of adapters (src/workloads/droidspeak_profiler.h): prints each layer's
// sensitivity to reusing another agent's K/V, marks the critical ones, and
// writes the profile JSON that `serve --droidspeak-profile` and
// `bench-agents --workload lragent-trace` load.
#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "workloads/droidspeak_profiler.h"

namespace agentkv::cli {

namespace {

struct DroidspeakArgs {
  DroidspeakProfilerOptions o;
  std::vector<std::string> adapters;  // NAME=PATH
  std::string out = "droidspeak-profile.json";
};

void run(DroidspeakArgs& a) {
  for (const std::string& spec : a.adapters) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      std::fprintf(stderr, "error: --adapter takes NAME=PATH, got '%s'\n", spec.c_str());
      set_exit_code(2);
      return;
    }
    a.o.adapters.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
  }
  a.o.progress = [](const std::string& s) { std::fprintf(stderr, "[profile-droidspeak] %s\n", s.c_str()); };
  Result<DroidspeakProfile> p = run_droidspeak_profiler(a.o);
  if (!p.is_ok()) {
    std::fprintf(stderr, "error: %s\n", p.status().message().c_str());
    set_exit_code(1);
    return;
  }
  std::printf(
      "| layer | sensitivity (mean KL, one layer's K/V from another agent) | critical |\n|---|---|---|\n");
  for (int32_t l = 0; l < p->n_layers; ++l) {
    const bool crit =
        std::find(p->critical_layers.begin(), p->critical_layers.end(), l) != p->critical_layers.end();
    std::printf("| %d | %.6f | %s |\n", l, p->sensitivity[l], crit ? "yes" : "");
  }
  std::string list;
  for (int32_t l : p->critical_layers) list += (list.empty() ? "" : ",") + std::to_string(l);
  std::printf("\ncritical layers (%zu of %d): %s\n", p->critical_layers.size(), p->n_layers, list.c_str());
  const Status st = save_droidspeak_profile(*p, a.out);
  if (!st.is_ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    set_exit_code(1);
    return;
  }
  std::fprintf(stderr, "wrote %s\n", a.out.c_str());
}

}  // namespace

void register_profile_droidspeak(CLI::App& app) {
  auto a = std::make_shared<DroidspeakArgs>();
  a->o.model_path = default_model_path();
  CLI::App* cmd = app.add_subcommand("profile-droidspeak",
                                     "DroidSpeak's critical layers: per layer, how far an agent's output "
                                     "moves when that layer's K/V comes from "
                                     "another agent (mean KL over seeded prompts, every ordered pair of "
                                     "--adapter); the most sensitive --fraction "
                                     "of layers is written as the profile serve --droidspeak-profile loads");
  cmd->add_option("-m,--model", a->o.model_path, "base model GGUF")->capture_default_str();
  cmd->add_option("-t,--threads", a->o.n_threads, "compute threads")->capture_default_str();
  cmd->add_option("--adapter", a->adapters, "NAME=PATH of a PEFT directory or GGUF LoRA; two or more")
      ->required();
  cmd->add_option("-o,--out", a->out, "profile JSON to write")->capture_default_str();
  cmd->add_option("--prompts", a->o.prompts, "seeded filler-text prompts")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--tokens", a->o.tokens, "tokens per prompt")
      ->capture_default_str()
      ->check(CLI::Range(16, 8192));
  cmd->add_option("--fraction", a->o.fraction, "share of the layers made critical (LRAgent: 11 of 32)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", a->o.seed, "seed of the prompts")->capture_default_str();
  cmd->callback([a] { run(*a); });
}

}  // namespace agentkv::cli
