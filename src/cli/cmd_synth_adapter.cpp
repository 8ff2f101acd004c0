// `agentkv synth-adapter`: write a random PEFT LoRA adapter for a base GGUF,
// and `agentkv adapter-info`: load an adapter (PEFT dir or GGUF LoRA) against
// a base, print what it holds, optionally dump its matrices.
#include <cstdio>
#include <sstream>

#include "adapter/lora_target.h"
#include "adapter/registry.h"
#include "adapter/synth_adapter.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "format/gguf.h"
#include "format/safetensors_writer.h"
#include "model/loader.h"
#include "model/model_spec.h"
#include "tokenizer/tokenizer.h"

namespace agentkv::cli {

namespace {

struct SynthAdapterArgs {
  std::string model = default_model_path();
  std::string out;
  int rank = 8;
  double alpha = 0;
  std::string targets = "q,k,v,o,gate,up,down";
  uint64_t seed = 1;
  double scale = 1.0;
  std::string shared_a;
  std::string alora_invocation;
  std::string dtype = "f32";
};

Result<std::array<bool, kLoraTargetCount>> parse_targets(const std::string& list) {
  std::array<bool, kLoraTargetCount> out{};
  std::stringstream ss(list);
  std::string item;
  bool any = false;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto t = lora_target_from_short(item);
    if (!t) {
      return make_error(ErrorCode::kInvalidArgument, "unknown target '", item,
                        "' (q, k, v, o, gate, up, down, or their *_proj names)");
    }
    out[static_cast<int32_t>(*t)] = any = true;
  }
  if (!any) return make_error(ErrorCode::kInvalidArgument, "--targets lists no module");
  return out;
}

void run_synth(const SynthAdapterArgs& a) {
  SynthAdapterConfig c;
  c.rank = a.rank;
  c.alpha = a.alpha;
  c.seed = a.seed;
  c.magnitude = a.scale;
  c.shared_a_group = a.shared_a;
  if (a.dtype == "bf16") c.bf16 = true;
  else if (a.dtype != "f32") return fail(make_error(ErrorCode::kInvalidArgument, "--dtype must be f32 or bf16"));
  auto targets = parse_targets(a.targets);
  if (!targets.is_ok()) return fail(targets.status());
  c.targets = *targets;

  auto f = GgufFile::open(a.model);
  if (!f.is_ok()) return fail(f.status());
  auto spec = model_spec_from_gguf(*f);
  if (!spec.is_ok()) return fail(spec.status().with_context(a.model));
  c.base_name = spec->name;
  if (!a.alora_invocation.empty()) {
    auto vocab = vocab_from_gguf(*f, spec->n_vocab);
    if (!vocab.is_ok()) return fail(vocab.status().with_context(a.model));
    auto tok = Tokenizer::create(std::move(vocab).value());
    if (!tok.is_ok()) return fail(tok.status());
    // No BOS: the sequence is matched inside a prompt; control tokens such as
    // <|im_start|> are recognised, as in a chat-formatted prompt.
    c.invocation_tokens = tok->encode(a.alora_invocation, false, true);
    if (c.invocation_tokens.empty()) {
      return fail(make_error(ErrorCode::kInvalidArgument, "--alora-invocation tokenizes to nothing"));
    }
  }
  std::fprintf(stderr, "[synth-adapter] loading %s\n", a.model.c_str());
  auto model = model_load_file(a.model, {.keep_packed = false});
  if (!model.is_ok()) return fail(model.status());
  auto rep = synth_adapter_write(c, **model, a.out);
  if (!rep.is_ok()) return fail(rep.status());
  std::printf("wrote %s: rank %d, alpha %g, seed %llu%s%s, %s\n", a.out.c_str(), c.rank,
              c.alpha > 0 ? c.alpha : 2.0 * c.rank, static_cast<unsigned long long>(c.seed),
              c.shared_a_group.empty() ? "" : ", shared-A group ", c.shared_a_group.c_str(), a.dtype.c_str());
  if (!c.invocation_tokens.empty()) {
    std::printf("alora_invocation_tokens:");
    for (int32_t id : c.invocation_tokens) std::printf(" %d", id);
    std::printf("\n");
  }
  std::printf("| target | ||scale * B A x|| / ||W x||, mean over %d layers (Gaussian x) |\n|---|---|\n",
              spec->n_layers);
  for (LoraTarget t : kAllLoraTargets) {
    const double r = rep->mean_ratio[static_cast<int32_t>(t)];
    if (r >= 0) std::printf("| %s | %.4f |\n", lora_target_peft_name(t), r);
  }
}

struct AdapterInfoArgs {
  std::string model = default_model_path();
  std::string adapter;
  std::string kind;
  std::string dump;
};

void run_info(const AdapterInfoArgs& a) {
  std::optional<AdapterKind> kind;
  if (!a.kind.empty()) {
    kind = adapter_kind_from_name(a.kind);
    if (!kind) return fail(make_error(ErrorCode::kInvalidArgument, "--kind must be lora, alora or icarus"));
  }
  auto f = GgufFile::open(a.model);
  if (!f.is_ok()) return fail(f.status());
  auto spec = model_spec_from_gguf(*f);
  if (!spec.is_ok()) return fail(spec.status().with_context(a.model));
  auto ad = load_adapter_files(a.adapter, *spec, spec->n_vocab, kind);
  if (!ad.is_ok()) return fail(ad.status());
  std::printf("source: %s\nkind: %s\nid: %s\nrank: %d\n", ad->source.c_str(), adapter_kind_name(ad->kind),
              ad->id.c_str(), ad->rank);
  std::printf("invocation_tokens:");
  for (int32_t id : ad->invocation_tokens) std::printf(" %d", id);
  std::printf("\n");
  SafetensorsWriter w;
  for (LoraTarget t : kAllLoraTargets) {
    int layers = 0;
    for (size_t l = 0; l < ad->layers.size(); ++l) {
      const LoraMatrix& m = ad->layers[l].at(t);
      if (m.empty()) continue;
      ++layers;
      if (a.dump.empty()) continue;
      const std::string p = "layers." + std::to_string(l) + "." + lora_target_peft_name(t);
      w.add_f32(p + ".a", {m.rank, m.d_in}, m.a);
      w.add_f32(p + ".b", {m.d_out, m.rank}, m.b);
      w.add_f32(p + ".scale", {1}, {m.scale});
    }
    if (layers) std::printf("%s: %d layers\n", lora_target_peft_name(t), layers);
  }
  if (!a.dump.empty()) {
    w.add_metadata("kind", adapter_kind_name(ad->kind));
    if (Status st = w.write(a.dump); !st.is_ok()) return fail(st);
    std::printf("dumped to %s\n", a.dump.c_str());
  }
}

}  // namespace

void register_synth_adapter(CLI::App& app) {
  auto a = std::make_shared<SynthAdapterArgs>();
  CLI::App* cmd = app.add_subcommand(
      "synth-adapter",
      "Write a random PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) for a base GGUF");
  cmd->add_option("-m,--model", a->model, "base GGUF model (shapes and tokenizer)")->capture_default_str();
  cmd->add_option("-o,--out", a->out, "output directory")->required();
  cmd->add_option("--rank", a->rank, "LoRA rank r")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--alpha", a->alpha, "lora_alpha (default 2 * rank, i.e. scale 2)");
  cmd->add_option("--targets", a->targets, "comma-separated modules: q,k,v,o,gate,up,down")->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed of B (and of A without --shared-a)")->capture_default_str();
  cmd->add_option("--scale", a->scale,
                  "multiplier on the default magnitude (adapter output ~3% of the base projection's)")
      ->capture_default_str();
  cmd->add_option("--shared-a", a->shared_a,
                  "shared-A group: A is drawn from this name only, so adapters of one group have bit-identical A");
  cmd->add_option("--alora-invocation", a->alora_invocation,
                  "invocation text, tokenized with the base tokenizer into alora_invocation_tokens (an aLoRA)");
  cmd->add_option("--dtype", a->dtype, "tensor dtype: f32 or bf16")->capture_default_str();
  cmd->callback([a] { run_synth(*a); });

  auto b = std::make_shared<AdapterInfoArgs>();
  CLI::App* info = app.add_subcommand("adapter-info", "Load an adapter against a base model and describe it");
  info->add_option("-m,--model", b->model, "base GGUF model")->capture_default_str();
  info->add_option("-a,--adapter", b->adapter, "PEFT adapter directory or llama.cpp GGUF LoRA file")->required();
  info->add_option("--kind", b->kind, "override the kind: lora, alora or icarus");
  info->add_option("--dump", b->dump,
                   "write the loaded matrices (B rows in GGUF order) and scales to this .safetensors file");
  info->callback([b] { run_info(*b); });
}

}  // namespace agentkv::cli
