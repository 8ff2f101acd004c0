#include "sharing/scheme_defaults.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sharing/scheme.h"

namespace agentkv {

namespace {

constexpr int64_t kMaxFileBytes = 1 << 20;  // a few KB in practice

// An int32 from a JSON integer of either signedness; false when it is not
// one or does not fit.
bool read_int32(const nlohmann::json& x, int32_t* out) {
  if (x.is_number_unsigned()) {
    if (x.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) return false;
    *out = static_cast<int32_t>(x.get<uint64_t>());
    return true;
  }
  if (!x.is_number_integer()) return false;
  const int64_t v = x.get<int64_t>();
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) return false;
  *out = static_cast<int32_t>(v);
  return true;
}

// Layers come from a scheme's profile (relay's l_*, droidspeak's critical
// layers), which the scheme reads before any file: a file's value would be
// shadowed, and would come without the hidden-state snapshots a profile
// sets up. So a defaults file may not name them.
bool is_layer_field(std::string_view name) {
  return name == "l_start" || name == "l_det" || name == "l_end" || name == "critical_layers";
}

// One scheme's parameters from its JSON object, by the API's field names.
Status read_params(const nlohmann::json& o, const std::string& where, KvSharingParams* p) {
  for (const auto& item : o.items()) {
    const std::string& key = item.key();
    const nlohmann::json& x = item.value();
    const KvSharingField* f = nullptr;
    for (const KvSharingField& c : kKvSharingFields) {
      if (key == c.name) f = &c;
    }
    if (f == nullptr) return make_error(ErrorCode::kParse, where, ".", key, ": not a kv_sharing parameter");
    if (is_layer_field(key)) {
      return make_error(ErrorCode::kInvalidArgument, where, ".", key,
                        ": layers come from the scheme's profile (--relay-profile, --droidspeak-profile or "
                        "--droidspeak-layers), not from a defaults file");
    }
    int32_t n = 0;
    if (f->real) {
      if (!x.is_number()) return make_error(ErrorCode::kParse, where, ".", key, ": not a number");
      p->*f->real = x.get<double>();
    } else if (f->integer) {
      if (!read_int32(x, &n)) return make_error(ErrorCode::kParse, where, ".", key, ": not a 32-bit integer");
      p->*f->integer = n;
    } else {
      return make_error(ErrorCode::kParse, where, ".", key, ": not a parameter a defaults file sets");
    }
  }
  return Status::ok();
}

}  // namespace

KvSharingParams resolve_params(const KvSharingParams& request, const KvSharingParams& server,
                               const SchemeDefaults& defaults, const SharingScheme& scheme) {
  KvSharingParams p = request.with_defaults(server);
  if (const auto d = defaults.find(std::string_view(scheme.params_scheme()->name())); d != defaults.end()) {
    p = p.with_defaults(d->second);
  }
  return p;
}

Result<SchemeDefaults> load_scheme_defaults(const std::string& path, std::string_view model_id) {
  const std::string where = "scheme defaults '" + path + "'";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return make_error(ErrorCode::kIo, "cannot read the scheme defaults '", path,
                      "': not a file (tools/scheme_defaults.py writes one from a bench-fidelity run)");
  }
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size > static_cast<std::uintmax_t>(kMaxFileBytes))
    return make_error(ErrorCode::kParse, where, ": larger than a defaults file (1 MiB)");
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(ErrorCode::kIo, "cannot read the scheme defaults '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return make_error(ErrorCode::kParse, where, ": not a JSON object");
  if (!j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != kSchemeDefaultsFormat)
    return make_error(ErrorCode::kParse, where, ": format is not ", kSchemeDefaultsFormat);
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != 1)
    return make_error(ErrorCode::kParse, where, ": unsupported version (this build reads version 1)");
  const auto model = j.find("model");
  if (model == j.end() || !model->is_object() || !model->contains("id") || !(*model)["id"].is_string())
    return make_error(ErrorCode::kParse, where, ": model.id is missing");
  const std::string id = (*model)["id"].get<std::string>();
  if (id != model_id) {
    return make_error(ErrorCode::kInvalidArgument, where, " was measured on another model (id ", id,
                      "); this one has id ", model_id, ": choose its defaults with tools/scheme_defaults.py");
  }
  const auto schemes = j.find("schemes");
  if (schemes == j.end() || !schemes->is_object())
    return make_error(ErrorCode::kParse, where, ": a \"schemes\" object is required");
  SchemeDefaults out;
  for (const auto& item : schemes->items()) {
    const std::string& name = item.key();
    if (!item.value().is_object())
      return make_error(ErrorCode::kParse, where, ": schemes.", name, " is not an object");
    if (name.find('+') != std::string::npos)
      return make_error(ErrorCode::kParse, where, ": schemes.", name,
                        ": one scheme per entry, not a composition");
    Result<const SharingScheme*> scheme = sharing_scheme_find(name);
    if (!scheme.is_ok()) return scheme.status().with_context(where);
    KvSharingParams p;
    AKV_RETURN_IF_ERROR(read_params(item.value(), where + ": schemes." + name, &p));
    AKV_RETURN_IF_ERROR((*scheme)->check_params(p).with_context(where));
    out.emplace(name, std::move(p));
  }
  return out;
}

}  // namespace agentkv
