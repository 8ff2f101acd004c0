// `agentkv synth-model`: write a random-weight model of any Llama-family shape.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <string>
#include <utility>

#include "cli/commands.h"
#include "cli/common.h"
#include "model/synth_model.h"

namespace agentkv::cli {

namespace {
constexpr std::pair<const char*, GgmlType> kTypes[] = {
    {"f32", GgmlType::kF32},   {"f16", GgmlType::kF16},   {"q4_0", GgmlType::kQ4_0},
    {"q4_1", GgmlType::kQ4_1}, {"q5_0", GgmlType::kQ5_0}, {"q5_1", GgmlType::kQ5_1},
    {"q8_0", GgmlType::kQ8_0}, {"q4_K", GgmlType::kQ4_K}, {"q5_K", GgmlType::kQ5_K},
    {"q6_K", GgmlType::kQ6_K},
};
constexpr const char* kTypeList = "f32, f16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K";
constexpr const char* kTypeHelp =
    "matrix type: f32, f16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K or q6_K. A matrix whose row length is "
    "not a multiple of 256 cannot be q4_K / q5_K / q6_K and is written as llama-quantize falls back: q5_0 / "
    "q5_1 / q8_0 (f16 if 32 does not divide it either); the other block types need every row length to be "
    "a multiple of 32";

SynthModelConfig zeroed() {
  SynthModelConfig c;
  c.n_layers = c.d_model = c.n_heads = c.n_kv_heads = c.ffn_dim = 0;
  c.init_std = 0;
  c.rope_freq_base = 0;
  return c;
}

struct SynthArgs {
  std::string preset = "tiny";
  std::string out;
  std::string vocab_from = default_model_path();
  std::string type = "f32";
  SynthModelConfig over = zeroed();  // fields set by flags override the preset when non-zero
  std::string arch;
  int untied = -1;
  uint64_t seed = 1;
};

void run(const SynthArgs& a) {
  auto cfg = synth_model_preset(a.preset);
  if (!cfg.is_ok()) return fail(cfg.status());
  SynthModelConfig c = *cfg;
  if (!a.arch.empty()) c.arch = a.arch;
  if (a.over.n_layers > 0) c.n_layers = a.over.n_layers;
  if (a.over.d_model > 0) c.d_model = a.over.d_model;
  if (a.over.n_heads > 0) c.n_heads = a.over.n_heads;
  if (a.over.n_kv_heads > 0) c.n_kv_heads = a.over.n_kv_heads;
  if (a.over.head_dim > 0) c.head_dim = a.over.head_dim;
  if (a.over.ffn_dim > 0) c.ffn_dim = a.over.ffn_dim;
  if (a.over.n_vocab > 0) c.n_vocab = a.over.n_vocab;
  if (a.over.rope_freq_base > 0) c.rope_freq_base = a.over.rope_freq_base;
  c.sliding_window = a.over.sliding_window;
  c.swa_pattern = a.over.swa_pattern;
  c.rope_freq_base_local = a.over.rope_freq_base_local;
  if (c.arch != "gemma3" && c.sliding_window > 0) {
    return fail(make_error(ErrorCode::kInvalidArgument, "--sliding-window is for --arch gemma3"));
  }
  if (a.untied == 1) c.tied_embeddings = false;
  c.seed = a.seed;
  if (a.over.init_std > 0) c.init_std = a.over.init_std;
  const auto type =
      std::find_if(std::begin(kTypes), std::end(kTypes), [&](const auto& t) { return a.type == t.first; });
  if (type == std::end(kTypes)) {
    return fail(
        make_error(ErrorCode::kInvalidArgument, "--type must be one of ", kTypeList, ", got '", a.type, "'"));
  }
  c.type = type->second;
  auto vf = GgufFile::open(a.vocab_from);
  if (!vf.is_ok()) return fail(vf.status());
  std::map<GgmlType, int> written;
  if (Status st = synth_model_write(c, *vf, a.out, &written); !st.is_ok()) return fail(st);
  // "12 q4_K, 3 q5_0": the matrices per type, the requested one first.
  std::string types;
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [t, n] : written) {
      if ((t == c.type) != (pass == 0)) continue;
      types +=
          (types.empty() ? "" : ", ") + std::to_string(n) + " " + ggml_type_name(static_cast<uint32_t>(t));
    }
  }
  std::printf("wrote %s: %s, %d layers, d_model %d, %d/%d heads, ffn %d, matrices %s\n", a.out.c_str(),
              c.arch.c_str(), c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.ffn_dim, types.c_str());
  int fell_back = 0;
  for (const auto& [t, n] : written) fell_back += t == c.type ? 0 : n;
  if (fell_back > 0) {
    std::printf(
        "note: %d matrices have rows not a multiple of 256 values, so not %s: written in "
        "llama-quantize's fallback type instead\n",
        fell_back, a.type.c_str());
  }
}
}  // namespace

void register_synth_model(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  CLI::App* cmd = app.add_subcommand("synth-model", "Write a random-weight Llama-family or Gemma 3 model as a GGUF file");
  cmd->add_option("-o,--out", a->out, "output .gguf path")->required();
  cmd->add_option("--preset", a->preset, "tiny, smollm2-135m, llama-1b or llama-8b")->capture_default_str();
  cmd->add_option("--arch", a->arch, "llama, mistral, qwen2, qwen3 or gemma3");
  cmd->add_option("--rope-base", a->over.rope_freq_base, "RoPE base (global layers; default: the preset's)");
  cmd->add_option("--sliding-window", a->over.sliding_window, "gemma3: keys a local layer sees (0: all layers global)");
  cmd->add_option("--swa-pattern", a->over.swa_pattern, "gemma3: one global layer in every N (default 6)");
  cmd->add_option("--rope-base-local", a->over.rope_freq_base_local, "gemma3: local layers' RoPE base (default 10000)");
  cmd->add_option("--layers", a->over.n_layers, "number of layers");
  cmd->add_option("--d-model", a->over.d_model, "embedding width");
  cmd->add_option("--heads", a->over.n_heads, "attention heads");
  cmd->add_option("--kv-heads", a->over.n_kv_heads, "key/value heads (GQA)");
  cmd->add_option("--head-dim", a->over.head_dim, "head dimension (default d_model / heads)");
  cmd->add_option("--ffn", a->over.ffn_dim, "feed-forward width");
  cmd->add_option("--vocab", a->over.n_vocab, "vocabulary rows (default: the vocabulary file's size)");
  cmd->add_option("--vocab-from", a->vocab_from, "GGUF whose tokenizer is copied")->capture_default_str();
  cmd->add_option("--type", a->type, kTypeHelp)->capture_default_str();
  cmd->add_flag("--untied{1}", a->untied, "separate output matrix instead of tied embeddings");
  cmd->add_option("--seed", a->seed, "random seed")->capture_default_str();
  cmd->add_option("--init-std", a->over.init_std, "standard deviation of the random matrices (default 0.02)");
  cmd->callback([a] { run(*a); });
}

}  // namespace agentkv::cli
