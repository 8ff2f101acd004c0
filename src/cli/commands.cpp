#include "cli/commands.h"

namespace agentkv::cli {

namespace {
int g_exit_code = 0;
}

void set_exit_code(int code) { g_exit_code = code; }
int exit_code() { return g_exit_code; }

void register_all(CLI::App& app) {
  register_generate(app);
  register_serve(app);
  register_logits(app);
  register_tokenize(app);
  register_chat_template(app);
  register_bench_forward(app);
  register_bench_agents(app);
  register_bench_fidelity(app);
  register_profile_relay(app);
  register_profile_droidspeak(app);
  register_bench_relay(app);
  register_synth_model(app);
  register_synth_adapter(app);
}

}  // namespace agentkv::cli
