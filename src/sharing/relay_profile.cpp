#include "sharing/relay_profile.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "sharing/profile_dir.h"

namespace agentkv {

namespace {

constexpr const char* kFormat = kRelayProfileFormat;
constexpr int kVersion = 1;

std::vector<double> ranks(const std::vector<float>& x) {
  std::vector<size_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && x[idx[j + 1]] == x[idx[i]]) ++j;
    const double avg = (static_cast<double>(i) + static_cast<double>(j)) / 2.0;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = avg;
    i = j + 1;
  }
  return r;
}

double nan() { return std::numeric_limits<double>::quiet_NaN(); }

}  // namespace

float value_deviation(const float* a, const float* b, int64_t kv_dim, int64_t head_dim) {
  const int64_t n_heads = kv_dim / head_dim;
  double sum = 0;
  for (int64_t h = 0; h < n_heads; ++h) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t d = h * head_dim; d < (h + 1) * head_dim; ++d) {
      ab += double{a[d]} * b[d];
      aa += double{a[d]} * a[d];
      bb += double{b[d]} * b[d];
    }
    sum += aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 1.0;
  }
  return static_cast<float>(1.0 - sum / static_cast<double>(n_heads));
}

double spearman(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.size() < 2) return nan();
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size());
  const double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / n, mb = std::accumulate(rb.begin(), rb.end(), 0.0) / n;
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    ab += (ra[i] - ma) * (rb[i] - mb);
    aa += (ra[i] - ma) * (ra[i] - ma);
    bb += (rb[i] - mb) * (rb[i] - mb);
  }
  if (aa <= 0 || bb <= 0) return nan();
  return ab / std::sqrt(aa * bb);
}

Result<RelaySampleStats> relay_sample_stats(const DeviationSample& s) {
  const int32_t L = static_cast<int32_t>(s.size());
  if (L < 1) return make_error(ErrorCode::kInvalidArgument, "a calibration sample has no layers");
  const size_t n = s[0].size();
  for (const auto& layer : s) {
    if (layer.size() != n) return make_error(ErrorCode::kInvalidArgument, "a calibration sample is ragged");
  }
  RelaySampleStats st;
  st.tokens = static_cast<int64_t>(n);
  st.sim_sum.assign(L, 0.0);
  st.rho.assign(L, nan());
  // A layer whose deviations are at the rounding floor ranks its tokens by
  // noise: layer 0's V depends on the token alone, and its d (an f32 V
  // against the f16 one cached) is about 1.5e-8. Its correlation with the
  // next layer is undefined, as when the deviations are exactly equal.
  auto ranked = [&](int32_t l) {
    double sum = 0;
    for (float d : s[l]) sum += d;
    return n > 0 && sum / static_cast<double>(n) >= kRelayRankFloor;
  };
  for (int32_t l = 0; l < L; ++l) {
    for (float d : s[l]) st.sim_sum[l] += 1.0 - d;
    if (l > 0 && ranked(l) && ranked(l - 1)) st.rho[l] = spearman(s[l], s[l - 1]);
  }
  return st;
}

namespace {

// The last layer of the initial run at or above tau.
int32_t start_layer(const std::vector<double>& s, const RelayProfileRules& r) {
  const int32_t L = static_cast<int32_t>(s.size());
  int32_t l = 0;
  while (l + 1 < L && s[l + 1] >= r.tau && s[l] >= r.tau) ++l;
  return l;
}

// The recovery after the dip, against the last T layers; L when none.
int32_t end_layer(const std::vector<double>& s, int32_t l_start, const RelayProfileRules& r) {
  const int32_t L = static_cast<int32_t>(s.size());
  const int32_t T = std::clamp(r.tail_layers, 1, L);
  double mu = 0, var = 0;
  for (int32_t l = L - T; l < L; ++l) mu += s[l];
  mu /= T;
  for (int32_t l = L - T; l < L; ++l) var += (s[l] - mu) * (s[l] - mu);
  const double sigma = std::sqrt(var / T);
  const double base = mu - sigma;
  const double step = std::max(r.lambda * sigma, 1e-12);
  // "before-tail" looks for the dip before the layers that set the baseline
  // (where there are any).
  const int32_t scan_end = r.end_rule == "before-tail" && L - T > l_start ? L - T : L;
  const int32_t l_min =
      static_cast<int32_t>(std::min_element(s.begin() + l_start, s.begin() + scan_end) - s.begin());
  for (int32_t l = l_min; l < L; ++l) {
    bool stable = l + r.stable_layers < L;
    for (int32_t k = l + 1; stable && k <= l + r.stable_layers; ++k) {
      stable = s[k] >= base && std::abs(s[k] - s[k - 1]) < step;
    }
    if (stable) return l;
  }
  return L;
}

// Where the curvature of the rank stability turns negative, plus one; -1
// when it never does.
int32_t detection_layer(const std::vector<double>& rho, const RelayProfileRules& r) {
  const int32_t L = static_cast<int32_t>(rho.size());
  const bool onset = r.det_rule == "onset";
  double prev_alpha = nan();
  for (int32_t l = 3; l < L; ++l) {
    const double alpha = rho[l] - 2 * rho[l - 1] + rho[l - 2];
    if (alpha < 0 && (onset || (!std::isnan(prev_alpha) && prev_alpha > 0))) return l + 1;
    if (!std::isnan(alpha)) prev_alpha = alpha;
  }
  return -1;
}

}  // namespace

Result<RelayProfile> relay_profile_from_stats(const std::vector<RelaySampleStats>& samples,
                                              const RelayProfileRules& rules) {
  if (rules.det_rule != "flip" && rules.det_rule != "onset") {
    return make_error(ErrorCode::kInvalidArgument, "l_det rule '", rules.det_rule,
                      "': expected flip or onset");
  }
  if (rules.end_rule != "literal" && rules.end_rule != "before-tail") {
    return make_error(ErrorCode::kInvalidArgument, "l_end rule '", rules.end_rule,
                      "': expected literal or before-tail");
  }
  if (samples.empty()) return make_error(ErrorCode::kInvalidArgument, "no calibration samples");
  const int32_t L = static_cast<int32_t>(samples[0].sim_sum.size());
  RelayProfile p;
  p.n_layers = L;
  p.rules = rules;
  p.samples = static_cast<int32_t>(samples.size());
  std::vector<double> sim_sum(L, 0.0), rho_sum(L, 0.0);
  std::vector<int32_t> rho_n(L, 0);
  for (const RelaySampleStats& st : samples) {
    if (static_cast<int32_t>(st.sim_sum.size()) != L || static_cast<int32_t>(st.rho.size()) != L) {
      return make_error(ErrorCode::kInvalidArgument, "calibration samples have different layer counts");
    }
    p.tokens += st.tokens;
    for (int32_t l = 0; l < L; ++l) {
      sim_sum[l] += st.sim_sum[l];
      if (!std::isnan(st.rho[l])) rho_sum[l] += st.rho[l], ++rho_n[l];
    }
  }
  if (p.tokens == 0)
    return make_error(ErrorCode::kInvalidArgument, "the calibration samples hold no reused token");
  p.similarity.resize(L);
  p.rho.assign(L, nan());
  for (int32_t l = 0; l < L; ++l) {
    p.similarity[l] = sim_sum[l] / static_cast<double>(p.tokens);
    if (rho_n[l] > 0) p.rho[l] = rho_sum[l] / rho_n[l];
  }
  p.l_start = start_layer(p.similarity, rules);
  p.l_end = std::max(end_layer(p.similarity, p.l_start, rules), std::min(p.l_start + 1, L));
  const int32_t l_det = detection_layer(p.rho, rules);
  p.l_det = std::clamp(l_det < 0 ? p.l_start : l_det, p.l_start, p.l_end - 1);
  return p;
}

Result<RelayProfile> compute_relay_profile(const std::vector<DeviationSample>& samples,
                                           const RelayProfileRules& rules) {
  if (samples.empty()) return make_error(ErrorCode::kInvalidArgument, "no calibration samples");
  std::vector<RelaySampleStats> stats;
  for (const DeviationSample& s : samples) {
    AKV_ASSIGN_OR_RETURN(RelaySampleStats st, relay_sample_stats(s));
    stats.push_back(std::move(st));
  }
  return relay_profile_from_stats(stats, rules);
}

Status save_relay_profile(const RelayProfile& p, const std::string& path) {
  auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
  nlohmann::json sim = nlohmann::json::array(), rho = nlohmann::json::array();
  for (double v : p.similarity) sim.push_back(num(v));
  for (double v : p.rho) rho.push_back(num(v));
  nlohmann::json j = {
      {"format", kFormat},
      {"version", kVersion},
      {"model", {{"id", p.model_id}, {"name", p.model_name}, {"n_layers", p.n_layers}}},
      {"layers", {{"l_start", p.l_start}, {"l_det", p.l_det}, {"l_end", p.l_end}}},
      {"rules",
       {{"tau", p.rules.tau},
        {"tail_layers", p.rules.tail_layers},
        {"lambda", p.rules.lambda},
        {"stable_layers", p.rules.stable_layers},
        {"det_rule", p.rules.det_rule},
        {"end_rule", p.rules.end_rule}}},
      {"calibration", {{"samples", p.samples}, {"tokens", p.tokens}, {"seed", p.seed}}},
      {"similarity", sim},
      {"rho", rho},
  };
  std::ofstream f(path);
  if (!f) return make_error(ErrorCode::kIo, "cannot write the relay profile '", path, "'");
  f << j.dump(2) << "\n";
  if (!f) return make_error(ErrorCode::kIo, "cannot write the relay profile '", path, "'");
  return Status::ok();
}

Result<RelayProfile> load_relay_profile(const std::string& path, const std::string& model_id, int32_t n_layers) {
  std::ifstream f(path);
  if (!f) return make_error(ErrorCode::kIo, "cannot read the relay profile '", path, "' (agentkv profile-relay makes one)");
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::kParse, "relay profile '", path, "': ", why);
  };
  if (j.is_discarded() || !j.is_object()) return bad("not JSON");
  if (j.value("format", "") != kFormat) return bad(std::string("not an ") + kFormat + " file");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != kVersion) {
    return bad("unsupported version (this build reads version 1)");
  }
  const nlohmann::json* model = j.contains("model") && j["model"].is_object() ? &j["model"] : nullptr;
  const nlohmann::json* layers = j.contains("layers") && j["layers"].is_object() ? &j["layers"] : nullptr;
  if (model == nullptr || layers == nullptr) return bad("'model' and 'layers' objects are required");
  RelayProfile p;
  if (!model->contains("id") || !(*model)["id"].is_string()) return bad("model.id is missing");
  p.model_id = (*model)["id"].get<std::string>();
  if (model->contains("name") && (*model)["name"].is_string()) p.model_name = (*model)["name"].get<std::string>();
  if (p.model_id != model_id) {
    return make_error(ErrorCode::kInvalidArgument, "relay profile '", path, "' is for another model ('", p.model_name,
                      "', id ", p.model_id, "); this one has id ", model_id,
                      ": profile it with agentkv profile-relay");
  }
  for (const char* k : {"l_start", "l_det", "l_end"}) {
    if (!layers->contains(k) || !(*layers)[k].is_number_integer()) return bad(std::string("layers.") + k + " is missing");
  }
  const int64_t a = (*layers)["l_start"].get<int64_t>(), d = (*layers)["l_det"].get<int64_t>(),
                e = (*layers)["l_end"].get<int64_t>();
  if (!(a >= 0 && a <= d && d < e && e <= n_layers)) {
    return bad("layers must satisfy 0 <= l_start <= l_det < l_end <= " + std::to_string(n_layers) + "; got " +
               std::to_string(a) + ", " + std::to_string(d) + ", " + std::to_string(e));
  }
  p.n_layers = n_layers;
  p.l_start = static_cast<int32_t>(a);
  p.l_det = static_cast<int32_t>(d);
  p.l_end = static_cast<int32_t>(e);
  return p;
}

}  // namespace agentkv
