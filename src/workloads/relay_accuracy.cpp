// bench-relay's accuracy-chain workload: every instance of the seeded
// three-agent task (relay_chain_task.h) under every scheme, greedy. Agent i's
// prompt is its role, the records and question (the segment the first agent's
// prompt cached), the upstream outputs (segments of their decode) and its
// instruction. `concurrency` instances are in flight at once, so the engine
// batches them; within an instance the schemes run one after another.
#include <atomic>
#include <mutex>
#include <thread>

#include "tokenizer/tokenizer.h"
#include "workloads/relay_chain.h"
#include "workloads/relay_chain_engine.h"
#include "workloads/relay_chain_prompt.h"

namespace agentkv {

namespace {

struct InstanceResult {
  bool correct = false;
  std::string final_text;
  std::vector<ChainAgentRun> runs;  // agents 1..3
};

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return '"' + s + '"';
}

Result<InstanceResult> run_instance(const AccuracyChainOptions& a, RelayEngine& re,
                                    const ChainPromptBuilder& b, const RelayTask& t, const SchemeSpec& scheme,
                                    const std::string& salt) {
  const Tokenizer& tok = re.engine->tokenizer();
  const std::vector<int32_t> body = tok.encode(t.document + "\n" + t.question, false, false);
  InstanceResult res;
  std::vector<ChainUpstream> up;
  for (size_t i = 0; i < t.agents.size(); ++i) {
    const RelayAgentText& ag = t.agents[i];
    ServeRequest req = chain_request(b.build(ag.role, body, up, ag.suffix), scheme, salt, a.gen_tokens);
    AKV_ASSIGN_OR_RETURN(ChainAgentRun run, chain_run_agent(*re.engine, std::move(req),
                                                            static_cast<int32_t>(i + 1), re.n_layers));
    up.push_back({ag.label, run.tokens});
    res.runs.push_back(std::move(run));
  }
  res.final_text = res.runs.back().text;
  res.correct = relay_answer_correct(res.final_text, t);
  return res;
}

// One scheme's row of the report, over every instance.
AccuracyRow accuracy_row(const RelayBenchOptions& o, const std::vector<RelayTask>& tasks,
                         const std::vector<std::vector<InstanceResult>>& results, size_t k, size_t none,
                         int32_t n_layers) {
  AccuracyRow row;
  row.label = o.schemes[k].label;
  row.instances = static_cast<int32_t>(tasks.size());
  int64_t computed = 0, dense = 0, downstream = 0, agree = 0, agent1 = 0, agent2 = 0;
  double reused = 0, cached = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const InstanceResult& ir = results[i][k];
    row.correct += ir.correct;
    agree += ir.final_text == results[i][none].final_text;
    agent1 += relay_answer_correct(ir.runs[0].text, tasks[i]);
    agent2 += relay_answer_correct(ir.runs[1].text, tasks[i]);
    for (const ChainAgentRun& run : ir.runs) {
      if (run.agent < 2) continue;
      computed += run.prefill_token_layers;
      dense += int64_t{run.prompt_tokens} * n_layers;
      reused += run.reused_tokens;
      cached += run.cached_tokens;
      ++downstream;
    }
  }
  row.accuracy = double(row.correct) / double(row.instances);
  row.reuse_rate = dense > 0 ? 1.0 - double(computed) / double(dense) : 0.0;
  row.reused_tokens = downstream ? reused / double(downstream) : 0;
  row.cached_tokens = downstream ? cached / double(downstream) : 0;
  row.agree_with_none = double(agree) / double(row.instances);
  row.agent1_accuracy = double(agent1) / double(row.instances);
  row.agent2_accuracy = double(agent2) / double(row.instances);
  return row;
}

// The progress line of a finished instance (and, with show_outputs, every
// agent's output); `correct_so_far` counts per scheme.
void report_instance(const RelayBenchOptions& o, const AccuracyChainOptions& a, const RelayTask& task,
                     size_t i, size_t done, size_t n_tasks, const std::vector<InstanceResult>& res,
                     std::vector<int32_t>* correct_so_far) {
  std::string line = "accuracy-chain " + std::to_string(done) + "/" + std::to_string(n_tasks) + " (#" +
                     std::to_string(i) + ", answer " + task.answer + "):";
  for (size_t k = 0; k < res.size(); ++k) {
    (*correct_so_far)[k] += res[k].correct;
    line += " " + o.schemes[k].label + " " + (res[k].correct ? "ok" : "no") + " (" +
            std::to_string((*correct_so_far)[k]) + "/" + std::to_string(done) + ")";
  }
  if (!o.progress) return;
  o.progress(line);
  if (!a.show_outputs) return;
  for (size_t k = 0; k < res.size(); ++k) {
    for (const ChainAgentRun& run : res[k].runs) {
      o.progress("  " + o.schemes[k].label + " agent " + std::to_string(run.agent) + ": " +
                 one_line(run.text));
    }
  }
}

}  // namespace

Result<AccuracyReport> run_accuracy_chain(const RelayBenchOptions& o, const AccuracyChainOptions& a) {
  if (a.instances < 1) return make_error(ErrorCode::kInvalidArgument, "--instances must be >= 1");
  if (a.concurrency < 1) return make_error(ErrorCode::kInvalidArgument, "--concurrency must be >= 1");
  const std::vector<RelayTask> tasks = make_relay_tasks(a.task, a.instances);
  // Each instance in flight keeps at most three sequences of a few hundred
  // tokens; the rest of the pool caches finished ones.
  const int64_t per_chain = 3 * (640 + int64_t{a.gen_tokens} * 3);
  AKV_ASSIGN_OR_RETURN(RelayEngine re, relay_engine_create(o, 4 * a.concurrency * per_chain + 8192));
  const ChainPromptBuilder b(re.engine->tokenizer());
  const size_t n_schemes = o.schemes.size();
  std::vector<std::vector<InstanceResult>> results(tasks.size(), std::vector<InstanceResult>(n_schemes));
  std::atomic<size_t> next{0};
  std::mutex mu;  // guards the progress, first_error and done
  Status first_error = Status::ok();
  size_t done = 0;
  std::vector<int32_t> correct_so_far(n_schemes, 0);
  auto worker = [&] {
    for (size_t i = next++; i < tasks.size(); i = next++) {
      for (size_t k = 0; k < n_schemes; ++k) {
        {
          std::lock_guard<std::mutex> lk(mu);
          if (!first_error.is_ok()) return;
        }
        const std::string salt = "relay-accuracy/" + std::to_string(i) + "/" + std::to_string(k);
        auto r = run_instance(a, re, b, tasks[i], o.schemes[k], salt);
        std::lock_guard<std::mutex> lk(mu);
        if (!r.is_ok()) {
          if (first_error.is_ok()) first_error = r.status().with_context("instance " + std::to_string(i));
          return;
        }
        results[i][k] = std::move(r).value();
      }
      std::lock_guard<std::mutex> lk(mu);
      ++done;
      report_instance(o, a, tasks[i], i, done, tasks.size(), results[i], &correct_so_far);
    }
  };
  std::vector<std::thread> pool;
  const int32_t n_threads = std::min<int32_t>(a.concurrency, a.instances);
  for (int32_t w = 0; w < n_threads; ++w) pool.emplace_back(worker);
  for (std::thread& th : pool) th.join();
  AKV_RETURN_IF_ERROR(first_error);

  AccuracyReport rep;
  rep.n_layers = re.n_layers;
  const size_t none = chain_none_index(o);
  for (size_t k = 0; k < n_schemes; ++k)
    rep.rows.push_back(accuracy_row(o, tasks, results, k, none, re.n_layers));
  return rep;
}

}  // namespace agentkv
