#include "adapter/synth_adapter.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "adapter/lora_target.h"
#include "format/safetensors_writer.h"
#include "util/hash.h"

namespace agentkv {
namespace {

// splitmix64 + Box-Muller: portable, so a seed means the same matrices on
// every platform (std::normal_distribution is implementation-defined).
class Gaussian {
 public:
  explicit Gaussian(uint64_t seed) : s_(seed) {}
  float next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(bits() >> 11) + 1.0) * 0x1p-53;  // (0, 1]
    const double u2 = static_cast<double>(bits() >> 11) * 0x1p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = static_cast<float>(r * std::sin(2.0 * M_PI * u2));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(2.0 * M_PI * u2));
  }

 private:
  uint64_t bits() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t s_;
  float spare_ = 0;
  bool has_spare_ = false;
};

uint64_t stream_seed(uint64_t base, int32_t layer, LoraTarget t, char tag) {
  const uint64_t key[4] = {base, static_cast<uint64_t>(layer), static_cast<uint64_t>(t), static_cast<uint64_t>(tag)};
  return hash_bytes(key, sizeof key, 0x5eed);
}

const DenseTensor& base_weight(const LayerWeights& l, LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ: return l.wq;
    case LoraTarget::kK: return l.wk;
    case LoraTarget::kV: return l.wv;
    case LoraTarget::kO: return l.wo;
    case LoraTarget::kGate: return l.w_gate;
    case LoraTarget::kUp: return l.w_up;
    case LoraTarget::kDown: return l.w_down;
  }
  return l.wq;
}

// y = M x for M (rows, cols) row-major.
void matvec(const float* m, int64_t rows, int64_t cols, const float* x, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0;
    const float* row = m + r * cols;
    for (int64_t c = 0; c < cols; ++c) acc += static_cast<double>(row[c]) * x[c];
    y[r] = static_cast<float>(acc);
  }
}

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error(ErrorCode::kIo, "cannot create ", path);
  out << text;
  if (!out) return make_error(ErrorCode::kIo, "write to ", path, " failed");
  return Status::ok();
}

// The measured |s·B·A·x| / |W·x| of one layer's A and B, on a few Gaussian
// probes (fixed seed: the same x for every adapter).
double probe_ratio(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& wv,
                   const LoraBaseShape& shape, int32_t rank, double scale, uint64_t probe_seed) {
  constexpr int kProbes = 4;
  Gaussian gx(probe_seed);
  std::vector<float> x(static_cast<size_t>(shape.d_in)), ax(static_cast<size_t>(rank)),
      bax(static_cast<size_t>(shape.d_out)), wx(static_cast<size_t>(shape.d_out));
  double layer_ratio = 0;
  for (int p = 0; p < kProbes; ++p) {
    for (float& v : x) v = gx.next();
    matvec(a.data(), rank, shape.d_in, x.data(), ax.data());
    matvec(b.data(), shape.d_out, rank, ax.data(), bax.data());
    matvec(wv.data(), shape.d_out, shape.d_in, x.data(), wx.data());
    const double wn = norm(wx);
    layer_ratio += wn > 0 ? scale * norm(bax) / wn : 0.0;
  }
  return layer_ratio / kProbes;
}

// PEFT's adapter_config.json for the synthetic adapter.
nlohmann::ordered_json peft_config_json(const SynthAdapterConfig& cfg, double alpha) {
  nlohmann::ordered_json c;
  c["peft_type"] = "LORA";
  c["task_type"] = "CAUSAL_LM";
  c["base_model_name_or_path"] = cfg.base_name;
  c["r"] = cfg.rank;
  c["lora_alpha"] = alpha;
  c["lora_dropout"] = 0.0;
  nlohmann::ordered_json targets = nlohmann::ordered_json::array();
  for (LoraTarget t : kAllLoraTargets)
    if (cfg.targets[static_cast<int32_t>(t)]) targets.push_back(lora_target_peft_name(t));
  c["target_modules"] = targets;
  c["bias"] = "none";
  c["fan_in_fan_out"] = false;
  c["use_rslora"] = false;
  c["use_dora"] = false;
  c["rank_pattern"] = nlohmann::ordered_json::object();
  c["alpha_pattern"] = nlohmann::ordered_json::object();
  c["layers_to_transform"] = nullptr;
  c["modules_to_save"] = nullptr;
  c["alora_invocation_tokens"] = cfg.invocation_tokens.empty()
                                     ? nlohmann::ordered_json(nullptr)
                                     : nlohmann::ordered_json(cfg.invocation_tokens);
  return c;
}

}  // namespace

Result<SynthAdapterReport> synth_adapter_write(const SynthAdapterConfig& cfg, const Model& base,
                                               const std::string& out_dir) {
  const ModelSpec& spec = base.spec;
  if (cfg.rank <= 0) return make_error(ErrorCode::kInvalidArgument, "rank must be positive");
  if (!(cfg.magnitude > 0) || !(cfg.target_ratio > 0)) {
    return make_error(ErrorCode::kInvalidArgument, "the magnitude must be positive");
  }
  if (static_cast<int32_t>(base.w.layers.size()) != spec.n_layers) {
    return make_error(ErrorCode::kInvalidArgument, "the base model has no layer weights");
  }
  const double alpha = cfg.alpha > 0 ? cfg.alpha : 2.0 * cfg.rank;
  const double scale = alpha / cfg.rank;
  const uint64_t a_seed = cfg.shared_a_group.empty()
                              ? cfg.seed
                              : hash_bytes(cfg.shared_a_group.data(), cfg.shared_a_group.size(), 0x5a4ed);
  const char a_tag = cfg.shared_a_group.empty() ? 'a' : 'g';

  SafetensorsWriter w;
  SynthAdapterReport report;
  report.mean_ratio.fill(-1.0);
  for (LoraTarget t : kAllLoraTargets) {
    if (!cfg.targets[static_cast<int32_t>(t)]) continue;
    const LoraBaseShape shape = lora_base_shape(spec, t);
    if (cfg.rank > shape.d_in || cfg.rank > shape.d_out) {
      return make_error(ErrorCode::kInvalidArgument, "rank ", cfg.rank, " exceeds the ", lora_target_peft_name(t),
                        " projection's smaller side ", std::min(shape.d_in, shape.d_out));
    }
    double ratio_sum = 0;
    for (int32_t layer = 0; layer < spec.n_layers; ++layer) {
      const DenseTensor& wt = base_weight(base.w.layers[static_cast<size_t>(layer)], t);
      if (wt.numel() != shape.d_out * shape.d_in) {
        return make_error(ErrorCode::kInvalidArgument, "base ", lora_target_peft_name(t), " of layer ", layer,
                          " has ", wt.numel(), " values, expected ", shape.d_out, " x ", shape.d_in);
      }
      const std::vector<float> wv = wt.values_f32();  // the base may keep it packed only
      if (wv.empty()) {  // a norm of nothing would scale B by zero
        return make_error(ErrorCode::kInvalidArgument, "base ", lora_target_peft_name(t), " of layer ", layer,
                          " cannot be read as f32 (held in the decode layout, or a type with no decoder): load "
                          "the base from its file without --decode-layout");
      }
      const double wnorm = norm(wv);
      const float sa = static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.d_in)));
      const float sb = static_cast<float>(cfg.magnitude * cfg.target_ratio * wnorm /
                                          (scale * std::sqrt(static_cast<double>(cfg.rank) * shape.d_out)));
      std::vector<float> a(static_cast<size_t>(cfg.rank * shape.d_in));
      std::vector<float> b(static_cast<size_t>(shape.d_out * cfg.rank));
      Gaussian ga(stream_seed(a_seed, layer, t, a_tag));
      for (float& v : a) v = sa * ga.next();
      Gaussian gb(stream_seed(cfg.seed, layer, t, 'b'));
      for (float& v : b) v = sb * gb.next();

      ratio_sum += probe_ratio(a, b, wv, shape, cfg.rank, scale, stream_seed(0x9e0be, layer, t, 'x'));

      const std::string an = peft_tensor_name(layer, t, false), bn = peft_tensor_name(layer, t, true);
      if (cfg.bf16) {
        w.add_bf16(an, {cfg.rank, shape.d_in}, a);
        w.add_bf16(bn, {shape.d_out, cfg.rank}, b);
      } else {
        w.add_f32(an, {cfg.rank, shape.d_in}, a);
        w.add_f32(bn, {shape.d_out, cfg.rank}, b);
      }
    }
    report.mean_ratio[static_cast<int32_t>(t)] = spec.n_layers ? ratio_sum / spec.n_layers : 0.0;
  }
  w.add_metadata("format", "pt");
  w.add_metadata("agentkv.synth.seed", std::to_string(cfg.seed));
  if (!cfg.shared_a_group.empty()) w.add_metadata("agentkv.synth.shared_a_group", cfg.shared_a_group);

  const nlohmann::ordered_json c = peft_config_json(cfg, alpha);

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return make_error(ErrorCode::kIo, "cannot create ", out_dir, ": ", ec.message());
  AKV_RETURN_IF_ERROR(write_text(out_dir + "/adapter_config.json", c.dump(2) + "\n"));
  AKV_RETURN_IF_ERROR(w.write(out_dir + "/adapter_model.safetensors"));
  return report;
}

}  // namespace agentkv
