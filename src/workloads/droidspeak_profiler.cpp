#include "workloads/droidspeak_profiler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "adapter/registry.h"
#include "backend/backend.h"
#include "kv/kv_storage.h"
#include "runtime/loaded_model.h"
#include "runtime/runner.h"
#include "util/file_id.h"
#include "util/stats.h"
#include "workloads/task_text.h"

namespace agentkv {

namespace {

// Mean over rows of KL(p || q) of two [rows, vocab] logits arrays, in double.
double mean_kl(const std::vector<float>& p_logits, const std::vector<float>& q_logits, int64_t vocab) {
  const int64_t rows = static_cast<int64_t>(p_logits.size()) / vocab;
  double total = 0;
  for (int64_t r = 0; r < rows; ++r)
    total += kl_divergence(&p_logits[r * vocab], &q_logits[r * vocab], vocab);
  return rows > 0 ? total / double(rows) : 0;
}

// The profiler's KV layout: three regions of nb blocks of bs tokens (the
// producer's K/V, the consumer's, and the mix: the consumer's with one layer
// the producer's), for prompts of n tokens scored from first_scored on.
struct ProfileRig {
  const ModelSpec& spec;
  int32_t bs, n, nb, first_scored;
};

// One prompt of the rig in region `region` under adapter `a`; keep_layer >= 0
// writes every layer but that one (the mix keeps the producer's K/V there).
Step profile_step(const ProfileRig& g, const std::vector<int32_t>& toks, const Adapter* a, int32_t region,
                  int32_t keep_layer) {
  Step st;
  st.adapters = {a};
  std::vector<int32_t> blocks(g.nb);
  for (int32_t i = 0; i < g.nb; ++i) blocks[i] = region * g.nb + i;
  if (keep_layer >= 0) {
    std::vector<uint8_t> m(g.spec.n_layers, 1);
    m[keep_layer] = 0;
    st.write_masks.push_back(std::move(m));
  }
  for (int32_t p = 0; p < g.n; ++p) {
    TokenRow row;
    row.token = toks[p];
    row.pos = p;
    row.slot = int64_t{blocks[p / g.bs]} * g.bs + p % g.bs;
    row.logits = p >= g.first_scored;
    row.adapter = 0;
    row.write_mask = keep_layer >= 0 ? 0 : -1;
    st.rows.push_back(row);
  }
  st.seqs = {StepSeq{0, g.n, blocks}};
  return st;
}

// Adds, per layer, the consumer's mean KL when that one layer's K/V is the
// producer's (against the consumer's own run).
Status add_pair_sensitivity(Runner& runner, KvStorage& kv, const ProfileRig& g,
                            const std::vector<int32_t>& toks, const Adapter& producer,
                            const Adapter& consumer, std::vector<double>* sensitivity) {
  const size_t row_bytes = size_t(kv.geometry().row_bytes());
  std::vector<float> ref, got;
  AKV_RETURN_IF_ERROR(runner.execute(profile_step(g, toks, &producer, 0, -1), &got));
  AKV_RETURN_IF_ERROR(runner.execute(profile_step(g, toks, &consumer, 1, -1), &ref));
  for (int32_t l = 0; l < g.spec.n_layers; ++l) {
    // The mix region: the producer's K/V at layer l (the consumer's rows
    // keep it there and write every other layer).
    for (int32_t p = 0; p < g.n; ++p) {
      std::memcpy(kv.k_at(l, 2 * g.nb + p / g.bs, p % g.bs), kv.k_at(l, p / g.bs, p % g.bs), row_bytes);
      std::memcpy(kv.v_at(l, 2 * g.nb + p / g.bs, p % g.bs), kv.v_at(l, p / g.bs, p % g.bs), row_bytes);
    }
    AKV_RETURN_IF_ERROR(runner.execute(profile_step(g, toks, &consumer, 2, l), &got));
    (*sensitivity)[l] += mean_kl(ref, got, g.spec.n_vocab);
  }
  return Status::ok();
}

}  // namespace

Result<DroidspeakProfile> run_droidspeak_profiler(const DroidspeakProfilerOptions& o) {
  if (o.adapters.size() < 2) {
    return make_error(ErrorCode::kInvalidArgument,
                      "profile-droidspeak needs at least two adapters (--adapter NAME=PATH)");
  }
  if (o.tokens < 16 || o.prompts < 1 || !(o.fraction > 0 && o.fraction <= 1)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--tokens must be >= 16, --prompts >= 1 and --fraction in (0, 1]");
  }
  AKV_ASSIGN_OR_RETURN(LoadedModel lm, load_model_file(o.model_path, o.n_threads));
  const ModelSpec& s = lm.model->spec;
  std::vector<Adapter> adapters;
  for (const auto& [name, path] : o.adapters) {
    AKV_ASSIGN_OR_RETURN(Adapter a, load_adapter_files(path, s, s.n_vocab, std::nullopt));
    a.name = name;
    adapters.push_back(std::move(a));
  }
  const int32_t bs = 16, n = o.tokens, nb = (n + bs - 1) / bs;
  // first_scored: positions with context enough for the reuse to show.
  const ProfileRig rig{s, bs, n, nb, n / 2};
  AKV_ASSIGN_OR_RETURN(KvStorage kv, KvStorage::create({s.n_layers, s.n_kv_heads, s.head_dim, bs}, 3 * nb));
  auto backend = backend_cpu_init(BackendConfig{o.n_threads});
  Runner runner(lm.model, backend.get(), &kv);
  DroidspeakProfile prof;
  prof.sensitivity.assign(s.n_layers, 0.0);
  int32_t n_runs = 0;
  std::mt19937_64 rng(o.seed);
  for (int32_t pi = 0; pi < o.prompts; ++pi) {
    const std::vector<int32_t> toks = task_filler_with(*lm.tokenizer, rng, n, {});
    for (size_t pa = 0; pa < adapters.size(); ++pa) {
      for (size_t ca = 0; ca < adapters.size(); ++ca) {
        if (pa == ca) continue;
        if (o.progress) {
          o.progress("prompt " + std::to_string(pi + 1) + "/" + std::to_string(o.prompts) + ": " +
                     adapters[pa].name + " -> " + adapters[ca].name);
        }
        AKV_RETURN_IF_ERROR(
            add_pair_sensitivity(runner, kv, rig, toks, adapters[pa], adapters[ca], &prof.sensitivity));
        ++n_runs;
      }
    }
  }
  for (double& x : prof.sensitivity) x /= std::max(1, n_runs);
  AKV_ASSIGN_OR_RETURN(prof.model_id, file_content_id(o.model_path));
  prof.model_name = std::filesystem::path(o.model_path).filename().string();
  prof.n_layers = s.n_layers;
  prof.fraction = o.fraction;
  prof.critical_layers = droidspeak_critical_layers(prof.sensitivity, o.fraction);
  for (const Adapter& a : adapters) prof.adapters.push_back(a.name);
  prof.prompts = o.prompts;
  prof.tokens = n;
  prof.seed = o.seed;
  return prof;
}

}  // namespace agentkv
