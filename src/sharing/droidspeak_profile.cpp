#include "sharing/droidspeak_profile.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "sharing/profile_dir.h"

namespace agentkv {

namespace {
constexpr const char* kFormat = kDroidspeakProfileFormat;
constexpr int64_t kVersion = 1;
}  // namespace

std::vector<int32_t> droidspeak_critical_layers(const std::vector<double>& sensitivity, double fraction) {
  const int32_t n = static_cast<int32_t>(sensitivity.size());
  const int32_t k = std::clamp(static_cast<int32_t>(std::ceil(fraction * n - 1e-9)), 0, n);
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return sensitivity[a] > sensitivity[b]; });
  std::vector<int32_t> out(order.begin(), order.begin() + k);
  std::sort(out.begin(), out.end());
  return out;
}

Status save_droidspeak_profile(const DroidspeakProfile& p, const std::string& path) {
  nlohmann::json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["model"] = {{"id", p.model_id}, {"name", p.model_name}, {"n_layers", p.n_layers}};
  j["critical_layers"] = p.critical_layers;
  j["fraction"] = p.fraction;
  j["sensitivity"] = p.sensitivity;
  j["calibration"] = {
      {"adapters", p.adapters}, {"prompts", p.prompts}, {"tokens", p.tokens}, {"seed", p.seed}};
  std::ofstream f(path);
  if (!f) return make_error(ErrorCode::kIo, "cannot write the droidspeak profile '", path, "'");
  f << j.dump(2) << "\n";
  if (!f) return make_error(ErrorCode::kIo, "cannot write the droidspeak profile '", path, "'");
  return Status::ok();
}

Result<DroidspeakProfile> load_droidspeak_profile(const std::string& path, const std::string& model_id,
                                                  int32_t n_layers) {
  std::ifstream f(path);
  if (!f) {
    return make_error(ErrorCode::kIo, "cannot read the droidspeak profile '", path,
                      "' (agentkv profile-droidspeak makes one)");
  }
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::kParse, "droidspeak profile '", path, "': ", why);
  };
  if (j.is_discarded() || !j.is_object()) return bad("not JSON");
  if (j.value("format", "") != kFormat) return bad(std::string("not an ") + kFormat + " file");
  if (!j.contains("version") || !j["version"].is_number_integer() ||
      j["version"].get<int64_t>() != kVersion) {
    return bad("unsupported version (this build reads version 1)");
  }
  const nlohmann::json* model = j.contains("model") && j["model"].is_object() ? &j["model"] : nullptr;
  if (model == nullptr || !model->contains("id") || !(*model)["id"].is_string())
    return bad("model.id is missing");
  DroidspeakProfile p;
  p.model_id = (*model)["id"].get<std::string>();
  if (model->contains("name") && (*model)["name"].is_string())
    p.model_name = (*model)["name"].get<std::string>();
  if (p.model_id != model_id) {
    return make_error(ErrorCode::kInvalidArgument, "droidspeak profile '", path, "' is for another model ('",
                      p.model_name, "', id ", p.model_id, "); this one has id ", model_id,
                      ": profile it with agentkv profile-droidspeak");
  }
  if (!j.contains("critical_layers") || !j["critical_layers"].is_array() || j["critical_layers"].empty()) {
    return bad("critical_layers must be a non-empty array");
  }
  for (const nlohmann::json& x : j["critical_layers"]) {
    if (!x.is_number_integer()) return bad("critical_layers holds a non-integer");
    const int64_t l = x.get<int64_t>();
    if (l < 0 || l >= n_layers) {
      return bad("critical layer " + std::to_string(l) + " is out of range (the model has " +
                 std::to_string(n_layers) + " layers)");
    }
    p.critical_layers.push_back(static_cast<int32_t>(l));
  }
  std::sort(p.critical_layers.begin(), p.critical_layers.end());
  if (std::adjacent_find(p.critical_layers.begin(), p.critical_layers.end()) != p.critical_layers.end()) {
    return bad("critical_layers lists a layer twice");
  }
  p.n_layers = n_layers;
  if (j.contains("sensitivity") && j["sensitivity"].is_array()) {
    for (const nlohmann::json& x : j["sensitivity"])
      p.sensitivity.push_back(x.is_number() ? x.get<double>() : NAN);
  }
  p.fraction = j.value("fraction", 0.0);
  return p;
}

}  // namespace agentkv
