#include "workloads/relay_capture_overhead.h"

#include <chrono>
#include <random>

#include "util/stats.h"
#include "workloads/relay_chain_engine.h"
#include "workloads/task_text.h"

namespace agentkv {

Result<std::vector<CaptureOverheadRow>> run_capture_overhead(const RelayBenchOptions& o,
                                                             const CaptureOverheadOptions& c) {
  RelayBenchOptions eo = o;
  eo.schemes.clear();
  AKV_ASSIGN_OR_RETURN(SchemeSpec none, parse_scheme_spec("none"));
  AKV_ASSIGN_OR_RETURN(SchemeSpec relay, parse_scheme_spec("relay"));
  eo.schemes = {none, relay};
  int32_t longest = 0;
  for (int32_t n : c.contexts) longest = std::max(longest, n);
  AKV_ASSIGN_OR_RETURN(RelayEngine re, relay_engine_create(eo, 4 * int64_t{longest + c.gen_tokens + 64}));
  ServingEngine& e = *re.engine;
  std::mt19937_64 rng(o.seed);
  std::vector<CaptureOverheadRow> rows;
  std::vector<std::vector<double>> plain(c.contexts.size()), captured(c.contexts.size());
  for (int32_t rep = 0; rep < c.reps; ++rep) {
    for (size_t i = 0; i < c.contexts.size(); ++i) {
      const std::vector<int32_t> prompt = task_filler_with(e.tokenizer(), rng, c.contexts[i], {});
      for (int k = 0; k < 2; ++k) {
        const SchemeSpec& s = k == 0 ? none : relay;
        ServeRequest r = chain_request(
            prompt, s, "overhead-" + std::to_string(rep) + "-" + std::to_string(i) + "-" + std::to_string(k),
            c.gen_tokens);
        r.ignore_eos = true;
        r.sampling.temperature = 0;
        const auto t0 = std::chrono::steady_clock::now();
        AKV_ASSIGN_OR_RETURN(ChainAgentRun run, chain_run_agent(e, std::move(r), 1, re.n_layers));
        const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double per_token_ms = 1e3 * (total - run.ttft_s) / std::max(1, run.completion_tokens - 1);
        (k == 0 ? plain : captured)[i].push_back(per_token_ms);
        if (o.progress) {
          o.progress("capture-overhead rep " + std::to_string(rep + 1) + " context " +
                     std::to_string(c.contexts[i]) + " " + s.label + ": " + std::to_string(per_token_ms) +
                     " ms/token");
        }
      }
    }
  }
  for (size_t i = 0; i < c.contexts.size(); ++i) {
    CaptureOverheadRow row;
    row.context = c.contexts[i];
    row.plain_ms = median(plain[i]);
    row.capture_ms = median(captured[i]);
    row.overhead = row.plain_ms > 0 ? row.capture_ms / row.plain_ms - 1 : 0;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace agentkv
