#include "workloads/droidspeak_profiler.h"

#include <algorithm>
#include <filesystem>
#include <random>

#include "adapter/registry.h"
#include "runtime/layer_swap_probe.h"
#include "runtime/loaded_model.h"
#include "util/file_id.h"
#include "workloads/task_text.h"

namespace agentkv {

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
  const int32_t n = o.tokens;
  AKV_ASSIGN_OR_RETURN(std::unique_ptr<LayerSwapProbe> probe,
                       LayerSwapProbe::create(lm.model, o.n_threads, n));
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
        // Scored from the prompt's middle: positions with context enough for the reuse to show.
        AKV_RETURN_IF_ERROR(
            probe->add_sensitivity(toks, adapters[pa], adapters[ca], n / 2, &prof.sensitivity));
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
