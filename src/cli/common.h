// Options and helpers shared by the subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "agentkv/kv_sharing_params.h"
#include "agentkv/serving.h"
#include "util/status.h"

namespace agentkv::cli {

// The engine flags of the one-shot model commands (generate, logits,
// bench-forward). They run the serving engine that `serve` runs.
struct EngineArgs {
  std::string model_path;
  int n_threads = 2;
  int32_t n_ctx = 4096;  // KV capacity in tokens (rounded up to whole blocks)
  int32_t block_size = 16;
  int32_t ubatch = 512;  // token rows per step: prefill chunks
  std::string kv_dtype = "f16";
  std::string act_quant = "q8";
  bool prepack_weights = false;
  bool decode_layout = true;
};

// The serving engine for EngineArgs: --ctx-size is both the KV pool and the
// longest prompt + completion, --ubatch the token budget of a step.
ServingOptions serving_options(const EngineArgs& a);

// The model file: --model, else $AGENTKV_MODEL, else the default model that
// scripts/setup.sh extracts.
std::string default_model_path();
// The committed DroidSpeak profile of the default model, "" when absent or another model is set.
std::string default_droidspeak_profile();

// Adds --model, --threads, --ctx-size, --block-size, --ubatch, --kv-dtype, --act-quant, --prepack-weights,
// --decode-layout.
void add_engine_options(CLI::App* cmd, EngineArgs* opts);
// Adds --kv-dtype (f16, bf16, f32) on any command that builds an engine.
void add_kv_dtype_option(CLI::App* cmd, std::string* kv_dtype);
// Adds --act-quant (f32, q8).
void add_act_quant_option(CLI::App* cmd, std::string* act_quant);
// Adds --prepack-weights and --decode-layout (ServingOptions::prepack_weights,
// ::decode_layout).
void add_prepack_option(CLI::App* cmd, bool* prepack_weights, bool* decode_layout);

// Checks a --kv-sharing value against the scheme registry (single schemes
// and compositions such as alora+sparsex); the error says what is wrong.
CLI::Validator kv_sharing_validator();

// Adds one flag per scheme parameter (sharing/param_flags.h), each setting
// its field of `params`: --reuse-ratio, --relay-l-start, --droidspeak-layers, ...
void add_kv_sharing_flags(CLI::App* cmd, KvSharingParams* params);

// Prints "error: <message>" to stderr and sets exit code 1.
void fail(const Status& st);

// Escapes control characters of a token piece for one-line display.
std::string escape_piece(const std::string& s);

// Parses "1,2,3" (spaces allowed) into token ids.
Result<std::vector<int32_t>> parse_token_list(const std::string& s);

}  // namespace agentkv::cli
