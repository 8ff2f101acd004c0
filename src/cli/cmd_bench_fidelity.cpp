// `agentkv bench-fidelity`: each approximate KV-sharing scheme against full
// recomputation on seeded multi-document passkey prompts (src/bench/
// fidelity.h). Prints a Markdown table; --json-out keeps the numbers for
// tools/plot_fidelity.py.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/fidelity.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "sharing/scheme.h"

namespace agentkv::cli {

namespace {

struct FidelityArgs {
  FidelityOptions o;
  std::vector<std::string> schemes = {"naive", "epic", "cacheblend"};
  std::string json_out;
};

// "cacheblend", "cacheblend:0.3" (ratio), "epic:32" (recompute tokens).
Result<FidelityScheme> parse_scheme(const std::string& spec) {
  FidelityScheme s;
  const size_t colon = spec.find(':');
  s.scheme = spec.substr(0, colon);
  s.label = spec;
  const SharingScheme* impl = sharing_scheme_get(s.scheme);
  if (impl == nullptr) return make_error(ErrorCode::kInvalidArgument, "--schemes: unknown scheme '", s.scheme, "'");
  if (colon != std::string::npos) {
    const std::string v = spec.substr(colon + 1);
    try {
      if (s.scheme == "cacheblend") {
        s.params.ratio = std::stod(v);
      } else if (s.scheme == "epic") {
        s.params.recompute_tokens = std::stoi(v);
      } else {
        return make_error(ErrorCode::kInvalidArgument, "--schemes: '", s.scheme, "' takes no value");
      }
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
                  "schemes to compare, comma-separated; cacheblend:RATIO and epic:N set their parameter")
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
