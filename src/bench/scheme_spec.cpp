#include "bench/scheme_spec.h"

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
  if (impl == nullptr) return make_error(ErrorCode::kInvalidArgument, "--schemes: unknown scheme '", s.scheme, "'");
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
    try {
      size_t used = 0;
      std::optional<double>* real = key == "ratio"                 ? &p.ratio
                                    : key == "dev_threshold"       ? &p.dev_threshold
                                    : key == "influence_threshold" ? &p.influence_threshold
                                                                   : nullptr;
      if (real != nullptr) {
        *real = std::stod(v, &used);
      } else {
        std::optional<int32_t>* dst = key == "recompute_tokens"     ? &p.recompute_tokens
                                      : key == "check_layer"        ? &p.check_layer
                                      : key == "boundary_layer"     ? &p.boundary_layer
                                      : key == "overflow_blocks"    ? &p.overflow_blocks
                                      : key == "tail_tokens"        ? &p.tail_tokens
                                      : key == "min_segment_tokens" ? &p.min_segment_tokens
                                      : key == "l_start"            ? &p.l_start
                                      : key == "l_det"              ? &p.l_det
                                      : key == "l_end"              ? &p.l_end
                                      : key == "suffix_tokens"      ? &p.suffix_tokens
                                                                    : nullptr;
        if (dst == nullptr) return make_error(ErrorCode::kInvalidArgument, "--schemes: unknown parameter '", key, "'");
        *dst = std::stoi(v, &used);
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
