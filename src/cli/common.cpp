#include "cli/common.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <thread>

#include "backend/backend.h"
#include "cli/commands.h"
#include "sharing/param_flags.h"
#include "sharing/scheme.h"

namespace agentkv::cli {

CLI::Validator kv_sharing_validator() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        const Result<const SharingScheme*> s = sharing_scheme_find(v);
        return s.is_ok() ? std::string() : s.status().message();
      },
      "SCHEME");
}

std::string default_model_path() {
  if (const char* e = std::getenv("AGENTKV_MODEL"); e && *e) return e;
  return "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string default_droidspeak_profile() {
  // Only for the default model: another model's profile would be refused.
  const char* path = "profiles/smollm2-135m-instruct-q4_1.droidspeak.json";
  if (const char* e = std::getenv("AGENTKV_MODEL"); e && *e) return "";
  return std::filesystem::exists(path) ? path : "";
}

ServingOptions serving_options(const EngineArgs& a) {
  ServingOptions so;
  so.model_path = a.model_path;
  so.n_threads = a.n_threads;
  so.block_size = a.block_size;
  so.kv_cache_tokens = a.n_ctx;
  so.max_model_len = a.n_ctx;
  so.max_batch_tokens = a.ubatch;
  so.kv_dtype = a.kv_dtype;
  so.act_quant = a.act_quant;
  so.prepack_weights = a.prepack_weights;
  so.decode_layout = a.decode_layout;
  return so;
}

void add_engine_options(CLI::App* cmd, EngineArgs* o) {
  o->model_path = default_model_path();
  o->n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cmd->add_option("-m,--model", o->model_path, "GGUF model file (default: $AGENTKV_MODEL or the SmolLM2 default)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", o->n_threads, "compute threads")->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_option("-c,--ctx-size", o->n_ctx, "KV cache capacity in tokens")->capture_default_str()
      ->check(CLI::Range(1, 1 << 22));
  cmd->add_option("--block-size", o->block_size, "tokens per KV block")->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--ubatch", o->ubatch, "max token rows per forward step during prefill")->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  add_kv_dtype_option(cmd, &o->kv_dtype);
  add_act_quant_option(cmd, &o->act_quant);
  add_prepack_option(cmd, &o->prepack_weights, &o->decode_layout);
}

void add_prepack_option(CLI::App* cmd, bool* prepack_weights, bool* decode_layout) {
  cmd->add_flag(
      "--prepack-weights", *prepack_weights,
      "with --act-quant q8: lay the layer weights out once at start for the prefill kernels instead "
      "of per prefill call (the same bits; prefill a few percent faster at most since the per-call "
      "layout prefetches its rows; the weights then take, per 32 values, 40 "
      "bytes more for q4_1, q5_1, q4_K and q5_K, 36 for q4_0, q5_0 and q8_0, 38 for q6_K: 2x a q4 file's, "
      "1.06x a q8_0's; logged at start)");
  cmd->add_flag("--decode-layout,!--no-decode-layout", *decode_layout,
                "with --act-quant q8 (the default): hold q4_K, q6_K, q5_0 and q8_0 matrices in records of eight rows "
                "that decode reads with no horizontal reduction, in place of the file's blocks (one copy, "
                "the same bits; decode of a Q4_K_M file faster: docs/usage.md); --no-decode-layout keeps "
                "the file's blocks")
      ->capture_default_str();
}

void add_kv_dtype_option(CLI::App* cmd, std::string* kv_dtype) {
  cmd->add_option("--kv-dtype", *kv_dtype,
                  "element type of the KV cache: f16 (half of f32's bytes per token), bf16, or f32 (exact f32 "
                  "attention inputs)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f16", "bf16", "f32"}));
}

void add_act_quant_option(CLI::App* cmd, std::string* act_quant) {
  cmd->add_option(
         "--act-quant", *act_quant,
         "activations of products with quantized weights (q4_0 to q8_0 and q4_K to q6_K): q8 (8-bit blocks "
         "and integer dot products, "
         "llama.cpp's arithmetic; faster) or f32 (exact product with the dequantized weights, the reference "
         "mode; ~1e-3 apart on the logits)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "q8"}));
  cmd->add_option_function<std::string>(
         "--isa",
         [](const std::string& name) {
           const Status st = backend_cpu_select_isa(name);
           if (!st.is_ok()) throw CLI::ValidationError(st.message());
         },
         "instruction set of the q8 kernels (and, at avx512 and amx, of attention's inner products): auto "
         "(the best this CPU runs, amx aside: same bits, but no faster than avx512 where measured), scalar, avx2, "
         "avxvnni, avx512, "
         "amx (AMX-INT8 tiles in prefill), amx-emulated (amx's kernel on software tiles, for tests); all give "
         "the same bits (default: auto)")
      ->type_name("ISA");
}

void fail(const Status& st) {
  std::fprintf(stderr, "error: %s\n", st.message().c_str());
  set_exit_code(1);
}

std::string escape_piece(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20) out += "\\x" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
    else out += static_cast<char>(c);
  }
  return out;
}

Result<std::vector<int32_t>> parse_token_list(const std::string& s) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ',' || s[i] == ' ' || s[i] == '\n' || s[i] == '\t')) ++i;
    if (i >= s.size()) break;
    size_t j = i;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j == i || j - i > 9) return make_error(ErrorCode::kInvalidArgument, "bad token id near '", s.substr(i, 12), "'");
    out.push_back(std::stoi(s.substr(i, j - i)));
    i = j;
  }
  return out;
}

void add_kv_sharing_flags(CLI::App* cmd, KvSharingParams* params) {
  for (const KvSharingFlag& f : kv_sharing_flags()) {
    const KvSharingField* field = nullptr;
    for (const KvSharingField& k : kKvSharingFields) {
      if (std::string_view(k.name) == f.field) field = &k;
    }
    if (field == nullptr) continue;  // a table test keeps the two tables in step
    if (field->integer) {
      cmd->add_option_function<int32_t>(
             f.flag, [params, m = field->integer](int32_t v) { params->*m = v; }, f.help)
          ->check(CLI::Range(static_cast<int32_t>(f.lo), static_cast<int32_t>(f.hi)));
    } else if (field->real) {
      cmd->add_option_function<double>(
             f.flag, [params, m = field->real](double v) { params->*m = v; }, f.help)
          ->check(CLI::Range(f.lo, f.hi));
    } else {
      const std::string flag = f.flag;
      const auto hi = static_cast<int32_t>(f.hi);
      cmd->add_option_function<std::string>(
             f.flag,
             [params, m = field->list, hi](const std::string& v) {
               std::vector<int32_t> layers;
               if (parse_layer_list(v, hi, &layers)) params->*m = std::move(layers);
             },
             f.help)
          ->check([flag, hi](const std::string& v) -> std::string {
            std::vector<int32_t> layers;
            return parse_layer_list(v, hi, &layers)
                       ? ""
                       : flag + " takes layer numbers separated by commas, e.g. 0,3,7";
          });
    }
  }
}

}  // namespace agentkv::cli
