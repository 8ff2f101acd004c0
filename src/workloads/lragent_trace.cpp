#include "workloads/lragent_trace.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "adapter/synth_adapter.h"
#include "agentkv/serving.h"
#include "runtime/loaded_model.h"
#include "workloads/engine_requests.h"

namespace agentkv {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kAgents[] = {"plan", "action", "reflect"};

// Random role adapters in the paper's setting (docs/scheme_algorithms.md §1.1): LoRA on
// q_proj and v_proj, r 8, alpha 16; A drawn from one name so the three
// share it (the paper shares v's A; q's is shared too here, which changes
// nothing the trace measures).
Result<std::vector<ServingOptions::AdapterSpec>> role_adapters(const AgentBenchOptions& o, const Model& model,
                                                               const std::string& given) {
  std::vector<ServingOptions::AdapterSpec> out;
  for (size_t i = 0; i < 3; ++i) {
    std::string dir;
    if (!given.empty()) {
      dir = given + "/" + kAgents[i];
    } else {
      SynthAdapterConfig c;
      c.seed = o.seed + 300 + i;
      c.rank = 8;
      c.alpha = 16;
      c.targets = {true, false, true, false, false, false, false};
      c.shared_a_group = "lragent-team";
      dir = o.work_dir + "/lragent_" + kAgents[i];
      AKV_ASSIGN_OR_RETURN(auto rep, synth_adapter_write(c, model, dir));
      (void)rep;
    }
    out.push_back({kAgents[i], dir, ""});
  }
  return out;
}

}  // namespace

std::vector<LragentTraceStep> lragent_trace_steps(int32_t ctx_len) {
  std::vector<LragentTraceStep> s = {{"plan", 512, 32}, {"plan", 8, 8}, {"action", 8, 8}};
  for (int i = 0; i < 4; ++i) {
    s.push_back({"plan", ctx_len, 32});
    s.push_back({"plan", 8, 8});
    s.push_back({"action", 8, 8});
  }
  s.push_back({"reflect", 32, 32});
  s.push_back({"reflect", 8, 8});
  return s;
}

Result<std::vector<LragentTraceResult>> run_lragent_trace(const AgentBenchOptions& o,
                                                          const LragentTraceOptions& t) {
  AKV_ASSIGN_OR_RETURN(LoadedModel lm, load_model_file(o.model_path, o.n_threads));
  const ModelSpec& spec = lm.model->spec;
  std::filesystem::create_directories(o.work_dir);
  AKV_ASSIGN_OR_RETURN(auto adapters, role_adapters(o, *lm.model, t.adapter_dir));
  std::vector<LragentTraceResult> results;
  int round = 0;
  for (int32_t L : t.ctx_lens) {
    const std::vector<LragentTraceStep> steps = lragent_trace_steps(L);
    int64_t longest = 0;
    for (const LragentTraceStep& s : steps) longest += s.prefill + s.decode;
    for (int32_t rep = 0; rep < t.reps; ++rep) {
      // The trace's new tokens, the same for every scheme.
      const std::vector<int32_t> fresh =
          bench::random_prompt(static_cast<int32_t>(longest), spec.n_vocab, o.seed + 1000 * L + rep);
      // Interleaved: the first scheme rotates with each repetition and length.
      for (size_t k = 0; k < t.schemes.size(); ++k) {
        const std::string& spec_name = t.schemes[(k + round) % t.schemes.size()];
        const bool noflash = spec_name.size() > 8 && spec_name.ends_with("+noflash");
        const std::string scheme = noflash ? spec_name.substr(0, spec_name.size() - 8) : spec_name;
        if (o.progress)
          o.progress("L_ctx " + std::to_string(L) + " rep " + std::to_string(rep) + ": " + spec_name);
        ServingOptions so;
        so.model_path = o.model_path;
        so.n_threads = o.n_threads;
        so.block_size = o.block_size;
        so.kv_dtype = o.kv_dtype;
        so.max_batch_tokens = o.max_batch_tokens;
        so.max_model_len = static_cast<int32_t>(longest + 64);
        so.kv_cache_tokens = 3 * (longest + 64);  // three agents' copies under none: nothing is evicted
        so.kv_sharing = scheme;
        so.flash_lora = !noflash;
        so.adapters = adapters;
        if (!t.critical_layers.empty()) so.kv_sharing_params.critical_layers = t.critical_layers;
        so.droidspeak_profile = t.droidspeak_profile;
        AKV_ASSIGN_OR_RETURN(auto eng, create_serving_engine(so));
        LragentTraceResult r;
        r.ctx_len = L;
        r.scheme = spec_name;
        r.rep = rep;
        std::vector<int32_t> traj;
        size_t used = 0;
        const Clock::time_point t0 = Clock::now();
        for (const LragentTraceStep& s : steps) {
          traj.insert(traj.end(), fresh.begin() + used, fresh.begin() + used + s.prefill);
          used += s.prefill;
          std::vector<bench::Done> d = bench::run_together(*eng, {bench::request(traj, s.decode, s.agent)});
          AKV_RETURN_IF_ERROR(bench::first_error(d));
          r.ttft_sum_s += d[0].ttft_s;
          r.computed_rows += d[0].prefill_token_layers / spec.n_layers;
          traj.insert(traj.end(), d[0].tokens.begin(), d[0].tokens.end());
          // The last event comes before the engine frees the request and
          // republishes its stats: wait for that, so the peak counts the
          // same state every run.
          ServingStats st = eng->stats();
          while (st.n_running > 0 || st.n_waiting > 0) {
            std::this_thread::sleep_for(std::chrono::microseconds(200));
            st = eng->stats();
          }
          const int64_t bytes = int64_t{st.kv_blocks_used + st.kv_blocks_cached} * st.kv_bytes_per_block +
                                int64_t{st.lr_blocks_used + st.lr_blocks_cached} * st.lr_bytes_per_block;
          r.peak_kv_bytes = std::max(r.peak_kv_bytes, bytes);
        }
        r.e2e_s = std::chrono::duration<double>(Clock::now() - t0).count();
        r.total_tokens = static_cast<int64_t>(traj.size());
        results.push_back(r);
      }
      ++round;
    }
  }
  return results;
}

}  // namespace agentkv
