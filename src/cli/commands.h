// Subcommand registration. Each cmd_*.cpp defines one register_* function that
// adds its subcommand and sets the exit code through set_exit_code.
#pragma once

#include <CLI/CLI.hpp>

namespace agentkv::cli {

void register_all(CLI::App& app);
void set_exit_code(int code);
int exit_code();

void register_generate(CLI::App& app);
void register_bench_forward(CLI::App& app);
void register_synth_model(CLI::App& app);
void register_synth_adapter(CLI::App& app);  // synth-adapter and adapter-info
void register_tokenize(CLI::App& app);
void register_chat_template(CLI::App& app);
void register_logits(CLI::App& app);
void register_serve(CLI::App& app);
void register_bench_agents(CLI::App& app);
void register_bench_fidelity(CLI::App& app);
void register_profile_relay(CLI::App& app);
void register_profile_droidspeak(CLI::App& app);
void register_bench_relay(CLI::App& app);

}  // namespace agentkv::cli
