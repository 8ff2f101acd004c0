// `agentkv bench-fidelity`: each approximate KV-sharing scheme against full
// recomputation on seeded multi-document passkey prompts (src/bench/
// fidelity.h). Prints a Markdown table; --json-out keeps the numbers for
// tools/plot_fidelity.py.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "bench/fidelity.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "sharing/scheme.h"

namespace agentkv::cli {

namespace {

struct FidelityArgs {
  FidelityOptions o;
  std::vector<std::string> schemes = {"naive", "epic", "cacheblend", "sparsex"};
  std::string json_out;
};

// SCHEME[:VALUE][:KEY=VALUE...]: "cacheblend", "cacheblend:0.3" (its
// ratio), "epic:32" (recompute tokens), "sparsex:ratio=0.3:boundary_layer=0".
// A bare VALUE is the scheme's main parameter; KEY is any kv_sharing
// parameter (docs/usage.md).
Result<FidelityScheme> parse_scheme(const std::string& spec) {
  FidelityScheme s;
  s.label = spec;
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t colon = spec.find(':', at);
    parts.push_back(spec.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  s.scheme = parts[0];
  const SharingScheme* impl = sharing_scheme_get(s.scheme);
  if (impl == nullptr) return make_error(ErrorCode::kInvalidArgument, "--schemes: unknown scheme '", s.scheme, "'");
  KvSharingParams& p = s.params;
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    std::string key = eq == std::string::npos ? "" : parts[i].substr(0, eq);
    const std::string v = eq == std::string::npos ? parts[i] : parts[i].substr(eq + 1);
    if (key.empty()) {  // the main parameter
      if (s.scheme == "cacheblend" || s.scheme == "sparsex") {
        key = "ratio";
      } else if (s.scheme == "epic") {
        key = "recompute_tokens";
      } else {
        return make_error(ErrorCode::kInvalidArgument, "--schemes: '", s.scheme, "' takes no value");
      }
    }
    try {
      size_t used = 0;
      if (key == "ratio") {
        p.ratio = std::stod(v, &used);
      } else {
        std::optional<int32_t>* dst = key == "recompute_tokens"     ? &p.recompute_tokens
                                      : key == "check_layer"        ? &p.check_layer
                                      : key == "boundary_layer"     ? &p.boundary_layer
                                      : key == "overflow_blocks"    ? &p.overflow_blocks
                                      : key == "tail_tokens"        ? &p.tail_tokens
                                      : key == "min_segment_tokens" ? &p.min_segment_tokens
                                                                    : nullptr;
        if (dst == nullptr) return make_error(ErrorCode::kInvalidArgument, "--schemes: unknown parameter '", key, "'");
        *dst = std::stoi(v, &used);
      }
      if (used != v.size()) throw std::invalid_argument(v);
    } catch (const std::exception&) {
      return make_error(ErrorCode::kInvalidArgument, "--schemes: bad value in '", spec, "'");
    }
  }
  AKV_RETURN_IF_ERROR(impl->check_params(s.params).with_context("--schemes " + spec));
  return s;
}

void print_row(const FidelityRow& r) {
  std::printf("| %s | %.4f | %.4f | %.1f%% | %.0f%% | %.1f%% | %.0f | %.3f | %.2fx | %.0f%% |\n", r.label.c_str(), r.mean_kl,
              r.max_kl, 100 * r.top1, 100 * r.exact, 100 * r.reuse, r.reused_tokens, r.ttft_s, r.speedup,
              100 * r.accuracy);
}

nlohmann::json row_json(const FidelityRow& r) {
  return {{"label", r.label},   {"mean_kl", r.mean_kl}, {"max_kl", r.max_kl},   {"top1", r.top1},
          {"exact", r.exact},   {"reuse", r.reuse},     {"reused_tokens", r.reused_tokens},
          {"ttft_s", r.ttft_s}, {"speedup", r.speedup}, {"accuracy", r.accuracy}};
}

void run(FidelityArgs a) {
  for (const std::string& spec : a.schemes) {
    auto s = parse_scheme(spec);
    if (!s.is_ok()) return fail(s.status());
    a.o.schemes.push_back(*s);
  }
  a.o.progress = [](const std::string& s) { std::fprintf(stderr, "[bench-fidelity] %s\n", s.c_str()); };
  auto rep = run_fidelity(a.o);
  if (!rep.is_ok()) return fail(rep.status());
  std::printf("\n%d prompts of %d tokens (%d documents x %d tokens), %d generated tokens, %d threads\n\n",
              a.o.tasks.n_prompts, rep->prompt_tokens, a.o.tasks.n_docs, a.o.tasks.doc_tokens, a.o.gen_tokens,
              a.o.n_threads);
  std::printf("| scheme | mean KL | worst KL | top-1 agree | greedy exact | reuse rate | reused tokens | TTFT s | TTFT speed-up | passkey accuracy |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  print_row(rep->full);
  for (const FidelityRow& r : rep->rows) print_row(r);
  if (!a.json_out.empty()) {
    nlohmann::json j;
    j["model"] = a.o.model_path;
    j["threads"] = a.o.n_threads;
    j["prompts"] = a.o.tasks.n_prompts;
    j["prompt_tokens"] = rep->prompt_tokens;
    j["docs"] = a.o.tasks.n_docs;
    j["doc_tokens"] = a.o.tasks.doc_tokens;
    j["gen_tokens"] = a.o.gen_tokens;
    j["rows"].push_back(row_json(rep->full));
    for (const FidelityRow& r : rep->rows) j["rows"].push_back(row_json(r));
    std::ofstream(a.json_out) << j.dump(2) << "\n";
  }
}

}  // namespace

void register_bench_fidelity(CLI::App& app) {
  auto a = std::make_shared<FidelityArgs>();
  a->o.model_path = default_model_path();
  CLI::App* cmd = app.add_subcommand(
      "bench-fidelity",
      "Approximate KV-sharing schemes against full recomputation: KL, top-1 agreement, greedy exact match, reuse "
      "rate, TTFT speed-up and passkey accuracy on seeded multi-document prompts");
  cmd->add_option("-m,--model", a->o.model_path, "base model GGUF")->capture_default_str();
  cmd->add_option("-t,--threads", a->o.n_threads, "compute threads")->capture_default_str();
  cmd->add_option("--schemes", a->schemes,
                  "schemes to compare, comma-separated: naive, epic, cacheblend, sparsex; SCHEME:V sets the main "
                  "parameter (cacheblend and sparsex: ratio, epic: recompute_tokens), SCHEME:KEY=V any other "
                  "(e.g. sparsex:0.15:boundary_layer=0)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--prompts", a->o.tasks.n_prompts, "prompts")->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("--docs", a->o.tasks.n_docs, "documents per prompt")->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--doc-tokens", a->o.tasks.doc_tokens, "tokens per document")
      ->capture_default_str()
      ->check(CLI::Range(48, 100000));
  cmd->add_option("--question-tokens", a->o.tasks.question_tokens,
                  "tokens of the question chunk (filler before the question; 0: the question only)")
      ->capture_default_str();
  cmd->add_option("--gen", a->o.gen_tokens, "generated tokens compared per prompt")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--seed", a->o.tasks.seed, "seed of the tasks")->capture_default_str();
  cmd->add_option("--block-size", a->o.block_size, "KV block size")->capture_default_str();
  cmd->add_option("--kv-cache-mb", a->o.kv_cache_mb, "KV cache of each engine, MiB")->capture_default_str();
  cmd->add_option("--json-out", a->json_out, "also write the results as JSON here");
  cmd->callback([a] { run(*a); });
}

}  // namespace agentkv::cli
