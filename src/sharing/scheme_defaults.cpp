#include "sharing/scheme_defaults.h"

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sharing/scheme.h"

namespace agentkv {

namespace {

constexpr int64_t kMaxFileBytes = 1 << 20;  // a few KB in practice

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
    const bool int32 = x.is_number_integer() && x.get<int64_t>() >= std::numeric_limits<int32_t>::min() &&
                       x.get<int64_t>() <= std::numeric_limits<int32_t>::max();
    if (f->real) {
      if (!x.is_number()) return make_error(ErrorCode::kParse, where, ".", key, ": not a number");
      p->*f->real = x.get<double>();
    } else if (f->integer) {
      if (!int32) return make_error(ErrorCode::kParse, where, ".", key, ": not a 32-bit integer");
      p->*f->integer = static_cast<int32_t>(x.get<int64_t>());
    } else {
      if (!x.is_array() || x.size() > 4096)
        return make_error(ErrorCode::kParse, where, ".", key, ": not a list");
      std::vector<int32_t> v;
      for (const nlohmann::json& e : x) {
        if (!e.is_number_integer() || e.get<int64_t>() < 0 ||
            e.get<int64_t>() > std::numeric_limits<int32_t>::max())
          return make_error(ErrorCode::kParse, where, ".", key, ": not a list of layer indexes");
        v.push_back(static_cast<int32_t>(e.get<int64_t>()));
      }
      p->*f->list = std::move(v);
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
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return make_error(ErrorCode::kIo, "cannot read the scheme defaults '", path,
                      "' (tools/scheme_defaults.py writes one from a bench-fidelity run)");
  }
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const std::string where = "scheme defaults '" + path + "'";
  if (static_cast<int64_t>(text.size()) > kMaxFileBytes)
    return make_error(ErrorCode::kParse, where, ": too large");
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return make_error(ErrorCode::kParse, where, ": not a JSON object");
  if (j.value("format", "") != kSchemeDefaultsFormat)
    return make_error(ErrorCode::kParse, where, ": format is not ", kSchemeDefaultsFormat);
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
