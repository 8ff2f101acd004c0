#include "workloads/scheme_spec.h"

#include <optional>
#include <stdexcept>
#include <vector>

#include "sharing/scheme.h"

namespace agentkv {

Result<SchemeSpec> parse_scheme_spec(const std::string& spec) {
  SchemeSpec s;
  s.label = spec;
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t colon = spec.find(':', at);
    parts.push_back(spec.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  s.scheme = parts[0];
  const SharingScheme* impl = sharing_scheme_get(s.scheme);
  if (impl == nullptr)
    return make_error(ErrorCode::kInvalidArgument, "--schemes: unknown scheme '", s.scheme, "'");
  KvSharingParams& p = s.params;
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    std::string key = eq == std::string::npos ? "" : parts[i].substr(0, eq);
    const std::string v = eq == std::string::npos ? parts[i] : parts[i].substr(eq + 1);
    if (key.empty()) {  // the main parameter
      if (s.scheme == "cacheblend" || s.scheme == "sparsex") {
        key = "ratio";
      } else if (s.scheme == "epic") {
        key = "recompute_tokens";
      } else {
        return make_error(ErrorCode::kInvalidArgument, "--schemes: '", s.scheme, "' takes no value");
      }
    }
    const KvSharingField* f = nullptr;
    for (const KvSharingField& c : kKvSharingFields) {
      if (key == c.name) f = &c;
    }
    if (f == nullptr)
      return make_error(ErrorCode::kInvalidArgument, "--schemes: unknown parameter '", key, "'");
    try {
      size_t used = 0;
      if (f->real) {
        p.*f->real = std::stod(v, &used);
      } else if (f->list) {
        // "a/b/c": ',' separates the schemes of --schemes.
        std::vector<int32_t> xs;
        for (size_t at = 0; at <= v.size();) {
          const size_t slash = std::min(v.find('/', at), v.size());
          size_t n = 0;
          xs.push_back(std::stoi(v.substr(at, slash - at), &n));
          if (n != slash - at) throw std::invalid_argument(v);
          at = slash + 1;
        }
        p.*f->list = std::move(xs);
        used = v.size();
      } else {
        p.*f->integer = std::stoi(v, &used);
      }
      if (used != v.size()) throw std::invalid_argument(v);
    } catch (const std::exception&) {
      return make_error(ErrorCode::kInvalidArgument, "--schemes: bad value in '", spec, "'");
    }
  }
  AKV_RETURN_IF_ERROR(impl->check_params(s.params).with_context("--schemes " + spec));
  return s;
}

}  // namespace agentkv
