// The `agentkv` command: one subcommand per file (cmd_*.cpp), registered here.
#include <CLI/CLI.hpp>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"agentkv: an LLM serving engine in which agents share one KV cache"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "agentkv 0.1.0");
  agentkv::cli::register_all(app);
  CLI11_PARSE(app, argc, argv);
  return agentkv::cli::exit_code();
}
