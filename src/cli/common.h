// Options and helpers shared by the subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "agentkv/engine.h"
#include "util/status.h"

namespace agentkv::cli {

// The model file: --model, else $AGENTKV_MODEL, else the default model that
// scripts/setup.sh extracts.
std::string default_model_path();

// Adds --model, --threads, --ctx-size, --block-size, --ubatch.
void add_engine_options(CLI::App* cmd, EngineOptions* opts);

// Prints "error: <message>" to stderr and sets exit code 1.
void fail(const Status& st);

// Escapes control characters of a token piece for one-line display.
std::string escape_piece(const std::string& s);

// Parses "1,2,3" (spaces allowed) into token ids.
Result<std::vector<int32_t>> parse_token_list(const std::string& s);

}  // namespace agentkv::cli
