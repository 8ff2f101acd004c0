// `agentkv bench-fidelity`: each approximate KV-sharing scheme against full
// recomputation on seeded multi-document prompts of one or more tasks
// (passkey and RULER analogs: src/workloads/fidelity_tasks.h, src/workloads/
// fidelity.h). Prints a Markdown table per task (and their average);
// --json-out keeps the numbers for tools/plot_fidelity.py.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "cli/commands.h"
#include "cli/common.h"
#include "sharing/scheme.h"
#include "util/file_id.h"
#include "workloads/fidelity.h"
#include "workloads/scheme_spec.h"

namespace agentkv::cli {

namespace {

// Shape options: unset, each task keeps its calibrated default
// (fidelity_task_defaults); set, they apply to every task that uses them.
struct TaskShapeArgs {
  std::optional<int32_t> n_docs, doc_tokens, needles, queries, chains, hops, words, common_freq, rare_freq, facts,
      session_turns, agent_tokens;
  std::optional<double> zipf_alpha;
};

struct FidelityArgs {
  FidelityOptions o;
  std::vector<std::string> schemes = {"naive", "epic", "cacheblend", "sparsex"};
  std::string json_out;
  std::string requests_out;
  std::vector<std::string> tasks = {"passkey"};
  TaskShapeArgs shape;
};

void print_row(const FidelityRow& r) {
  std::printf("| %s | %.4f | %.4f | %.1f%% | %.0f%% | %.1f%% | %.0f | %.3f | %.2fx | %.1f%% |\n", r.label.c_str(),
              r.mean_kl, r.max_kl, 100 * r.top1, 100 * r.exact, 100 * r.reuse, r.reused_tokens, r.ttft_s, r.speedup,
              100 * r.accuracy);
}

void print_table(const FidelityRow& full, const std::vector<FidelityRow>& rows) {
  std::printf("| scheme | mean KL | worst KL | top-1 agree | greedy exact | reuse rate | reused tokens | TTFT s | TTFT speed-up | accuracy |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  print_row(full);
  for (const FidelityRow& r : rows) print_row(r);
}

nlohmann::json row_json(const std::string& task, const FidelityRow& r) {
  return {{"task", task},           {"label", r.label},
          {"mean_kl", r.mean_kl},   {"max_kl", r.max_kl},
          {"top1", r.top1},         {"exact", r.exact},
          {"reuse", r.reuse},       {"reused_tokens", r.reused_tokens},
          {"ttft_s", r.ttft_s},     {"speedup", r.speedup},
          {"accuracy", r.accuracy}, {"scores", r.scores},
          {"kls", r.kls},           {"reuses", r.reuses}};
}

// A scheme setting as the API's kv_sharing object: its name and the
// parameters the setting names (the others are the server's defaults).
nlohmann::json sharing_json(const std::string& scheme, const KvSharingParams& p) {
  nlohmann::json sharing = {{"scheme", scheme}};
  for (const KvSharingField& f : kKvSharingFields) {
    if (f.integer && (p.*f.integer)) sharing[f.name] = *(p.*f.integer);
    if (f.real && (p.*f.real)) sharing[f.name] = *(p.*f.real);
    if (f.list && (p.*f.list)) sharing[f.name] = *(p.*f.list);
  }
  return sharing;
}

// One line of --requests-out: what replays a scheme's run of a prompt on a
// server (scripts/audit_vs_bench.py), and what it gave here.
nlohmann::json request_json(const std::string& task, const FidelityRequestLog& r) {
  const nlohmann::json sharing = sharing_json(r.scheme->scheme, r.scheme->params);
  return {{"task", task},
          {"prompt_index", r.prompt_index},
          {"label", r.scheme->label},
          {"kv_sharing", sharing},
          {"cache_prompts", r.cache_prompts},
          {"cache_forced", r.cache_forced},
          {"cache_under_scheme", r.cache_under_scheme},
          {"prompt", r.prompt},
          {"tokens", r.tokens},
          {"reference", r.reference},
          {"kl", r.kl}};
}

// The task's calibrated shape with the shared options and the set shape
// options over it.
Result<FidelityTaskOptions> task_options(const FidelityArgs& a, const std::string& kind) {
  AKV_ASSIGN_OR_RETURN(FidelityTaskOptions t, fidelity_task_defaults(kind));
  t.n_prompts = a.o.tasks.n_prompts;
  t.question_tokens = a.o.tasks.question_tokens;
  t.seed = a.o.tasks.seed;
  const TaskShapeArgs& s = a.shape;
  t.n_docs = s.n_docs.value_or(t.n_docs);
  t.doc_tokens = s.doc_tokens.value_or(t.doc_tokens);
  t.needles = s.needles.value_or(t.needles);
  t.queries = s.queries.value_or(t.queries);
  t.chains = s.chains.value_or(t.chains);
  t.hops = s.hops.value_or(t.hops);
  t.answer_words = s.words.value_or(t.answer_words);
  t.common_freq = s.common_freq.value_or(t.common_freq);
  t.rare_freq = s.rare_freq.value_or(t.rare_freq);
  t.zipf_alpha = s.zipf_alpha.value_or(t.zipf_alpha);
  t.facts = s.facts.value_or(t.facts);
  t.session_turns = s.session_turns.value_or(t.session_turns);
  t.agent_tokens = s.agent_tokens.value_or(t.agent_tokens);
  return t;
}

void run(FidelityArgs a) {
  for (const std::string& spec : a.schemes) {
    if (spec.empty()) continue;  // --schemes '': full recomputation alone (a task's own accuracy)
    auto s = parse_scheme_spec(spec);
    if (!s.is_ok()) return fail(s.status());
    a.o.schemes.push_back(*s);
  }
  std::vector<FidelityTaskOptions> shapes;
  for (const std::string& kind : a.tasks) {
    auto t = task_options(a, kind);
    if (!t.is_ok()) return fail(t.status().with_context("--task"));
    shapes.push_back(*t);
  }
  a.o.progress = [](const std::string& s) { std::fprintf(stderr, "[bench-fidelity] %s\n", s.c_str()); };
  std::ofstream requests;
  if (!a.requests_out.empty()) {
    requests.open(a.requests_out);
    if (!requests)
      return fail(make_error(ErrorCode::kInvalidArgument, "--requests-out: cannot write ", a.requests_out));
  }
  std::string kind;  // the task being run, for the request log
  if (requests.is_open()) {
    a.o.on_request = [&](const FidelityRequestLog& r) { requests << request_json(kind, r).dump() << "\n"; };
  }
  nlohmann::json j;
  j["model"] = a.o.model_path;
  // The model's content id: tools/scheme_defaults.py writes it into the
  // per-model defaults that serve finds by it.
  if (auto id = file_content_id(a.o.model_path); id.is_ok()) j["model_id"] = *id;
  j["threads"] = a.o.n_threads;
  j["prompts"] = a.o.tasks.n_prompts;
  j["gen_tokens"] = a.o.gen_tokens;
  std::vector<FidelityRow> fulls;
  std::vector<std::vector<FidelityRow>> per_scheme(a.o.schemes.size());
  for (const FidelityTaskOptions& t : shapes) {
    FidelityOptions o = a.o;
    o.tasks = t;
    kind = t.kind;
    auto rep = run_fidelity(o);
    if (!rep.is_ok()) return fail(rep.status());
    std::printf("\n%s: %d prompts of %d tokens (%d documents of <= %d tokens), %d generated tokens, %d threads\n\n",
                t.kind.c_str(), t.n_prompts, rep->prompt_tokens, t.n_docs, t.doc_tokens, o.gen_tokens, o.n_threads);
    print_table(rep->full, rep->rows);
    std::fflush(stdout);
    fulls.push_back(rep->full);
    for (size_t k = 0; k < rep->rows.size(); ++k) per_scheme[k].push_back(rep->rows[k]);
    if (!j.contains("prompt_tokens")) j["prompt_tokens"] = rep->prompt_tokens, j["doc_tokens"] = t.doc_tokens;
    j["tasks"].push_back({{"task", t.kind},
                          {"prompt_tokens", rep->prompt_tokens},
                          {"docs", t.n_docs},
                          {"doc_tokens", t.doc_tokens}});
    j["rows"].push_back(row_json(t.kind, rep->full));
    for (size_t k = 0; k < rep->rows.size(); ++k) {
      nlohmann::json row = row_json(t.kind, rep->rows[k]);
      row["kv_sharing"] = sharing_json(o.schemes[k].scheme, o.schemes[k].params);
      j["rows"].push_back(std::move(row));
    }
  }
  if (shapes.size() > 1) {
    // Each task weighs the same, whatever its prompt count or length.
    std::printf("\naverage over %zu tasks\n\n", shapes.size());
    const FidelityRow full = fidelity_average_row("full", fulls);
    std::vector<FidelityRow> rows;
    for (size_t k = 0; k < per_scheme.size(); ++k) {
      rows.push_back(fidelity_average_row(a.o.schemes[k].label, per_scheme[k]));
    }
    print_table(full, rows);
    j["rows"].push_back(row_json("average", full));
    for (const FidelityRow& r : rows) j["rows"].push_back(row_json("average", r));
  }
  if (!a.json_out.empty()) std::ofstream(a.json_out) << j.dump(2) << "\n";
}

// Each task's shape, beyond the documents and their length.
void add_task_shape_flags(CLI::App* cmd, TaskShapeArgs* shape) {
  cmd->add_option("--needles", shape->needles, "mq-niah: key-value needles in the context (default 4)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--queries", shape->queries, "mq-niah: keys asked, <= needles (default 2)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--chains", shape->chains, "vt: chains of assignments, the first one asked (default 1)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--hops", shape->hops, "vt: assignments after the first in each chain (default 2)")
      ->check(CLI::Range(0, 100));
  cmd->add_option("--words", shape->words, "cwe: common words asked (default 3)")->check(CLI::Range(1, 100));
  cmd->add_option("--common-freq", shape->common_freq, "cwe: occurrences of each common word (default 25)")
      ->check(CLI::Range(2, 1000));
  cmd->add_option("--rare-freq", shape->rare_freq, "cwe: occurrences of each other word (default 1)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--zipf-alpha", shape->zipf_alpha, "fwe: Zipf exponent of the word counts (default 2)")
      ->check(CLI::Range(1.01, 10.0));
  cmd->add_option("--facts", shape->facts, "chat: facts told in the history, the first one asked (default 3)")
      ->check(CLI::Range(1, 10));
  cmd->add_option("--session-turns", shape->session_turns,
                  "chat: turns cached together, as one session of the history (default 2)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--agent-tokens", shape->agent_tokens,
                  "agents: most tokens of an agent's report (default 96)")
      ->check(CLI::Range(1, 4096));
}

}  // namespace

void register_bench_fidelity(CLI::App& app) {
  auto a = std::make_shared<FidelityArgs>();
  a->o.model_path = default_model_path();
  CLI::App* cmd = app.add_subcommand(
      "bench-fidelity",
      "Approximate KV-sharing schemes against full recomputation: KL, top-1 agreement, greedy exact match, reuse "
      "rate, TTFT speed-up and task accuracy on seeded multi-document prompts (passkey, RULER-style tasks, multi-round "
      "chat and an agent workflow)");
  cmd->add_option("-m,--model", a->o.model_path, "base model GGUF")->capture_default_str();
  cmd->add_option("-t,--threads", a->o.n_threads, "compute threads")->capture_default_str();
  cmd->add_option("--schemes", a->schemes,
                  "schemes to compare, comma-separated: naive, epic, cacheblend, sparsex, relay; SCHEME:V sets the main "
                  "parameter (cacheblend and sparsex: ratio, epic: recompute_tokens), SCHEME:KEY=V any other "
                  "(e.g. sparsex:0.15:boundary_layer=0); '' for full recomputation alone (a task's own accuracy)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--task", a->tasks,
                  "tasks, comma-separated: passkey, retrieval (a person's number in one document), mq-niah "
                  "(multi-query needles), vt (variable tracking), cwe "
                  "(common words), fwe (frequent words), chat (a question about an early turn of a cached "
                  "conversation), "
                  "agents (a judge over reused agent reports); a table each, and their average")
      ->delimiter(',')
      ->check(CLI::IsMember(fidelity_task_kinds()))
      ->capture_default_str();
  cmd->add_option("--prompts", a->o.tasks.n_prompts, "prompts per task")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--docs", a->shape.n_docs,
                  "documents per prompt (chat: turns of the history, agents: agents; default per task: chat 8, "
                  "agents 3, the others 4)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--doc-tokens", a->shape.doc_tokens,
                  "tokens per document (default per task: passkey 80, retrieval 160, mq-niah 200, vt 200, "
                  "cwe 200, fwe 200, chat 100 "
                  "per turn, agents 120 per note; cwe and fwe fill up to it)")
      ->check(CLI::Range(48, 100000));
  cmd->add_option("--question-tokens", a->o.tasks.question_tokens,
                  "tokens of the question chunk (filler before the question; 0: the question only)")
      ->capture_default_str();
  cmd->add_option("--gen", a->o.gen_tokens, "generated tokens compared per prompt")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--seed", a->o.tasks.seed, "seed of the tasks")->capture_default_str();
  add_task_shape_flags(cmd, &a->shape);
  cmd->add_option("--block-size", a->o.block_size, "KV block size")->capture_default_str();
  cmd->add_option("--kv-cache-mb", a->o.kv_cache_mb, "KV cache of each engine, MiB")->capture_default_str();
  cmd->add_option("--max-batch-tokens", a->o.max_batch_tokens,
                  "prompt tokens per step of each engine: a longer prompt is prefilled in chunks (the default "
                  "takes every prompt here in one)")
      ->capture_default_str()
      ->check(CLI::Range(16, 1 << 20));
  add_kv_dtype_option(cmd, &a->o.kv_dtype);
  add_act_quant_option(cmd, &a->o.act_quant);
  a->o.relay_profile = "profiles/smollm2-135m-instruct-q4_1.relay.json";
  cmd->add_option("--relay-profile", a->o.relay_profile,
                  "relay: the model's layer profile (agentkv profile-relay), loaded only when a scheme is relay; "
                  "the default is SmolLM2-135M's committed one, '' for none")
      ->capture_default_str();
  cmd->add_option(
         "--teacher", a->o.teacher,
         "whose greedy tokens the KL and top-1 agreement are measured on: full (the reference's, forced "
         "into each scheme) or scheme (each scheme's own, forced into an exact re-run, as serve "
         "--fidelity-audit measures served requests)")
      ->check(CLI::IsMember({"full", "scheme"}))
      ->capture_default_str();
  cmd->add_option("--json-out", a->json_out, "also write the results as JSON here");
  cmd->add_option(
      "--requests-out", a->requests_out,
      "also write each scheme's run of each prompt here, one JSON object a line: the cache requests, "
      "the prompt, the kv_sharing object, the greedy tokens and the prompt's KL (what "
      "scripts/audit_vs_bench.py replays on a server)");
  cmd->callback([a] { run(*a); });
}

}  // namespace agentkv::cli
