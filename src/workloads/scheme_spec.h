// A KV-sharing scheme with its parameters as benchmarks name it on the
// command line: SCHEME[:VALUE][:KEY=VALUE...], e.g. "cacheblend",
// "cacheblend:0.3" (its ratio), "epic:32" (recompute tokens),
// "sparsex:ratio=0.3:boundary_layer=0". A bare VALUE is the scheme's main
// parameter; KEY is any kv_sharing parameter (docs/usage.md). The scheme
// checks the values (SharingScheme::check_params).
#pragma once

#include <string>

#include "agentkv/kv_sharing_params.h"
#include "util/status.h"

namespace agentkv {

struct SchemeSpec {
  std::string label;   // the spec as given, for tables
  std::string scheme;  // kv_sharing name
  KvSharingParams params;
};

// kInvalidArgument naming the spec for an unknown scheme, parameter or value.
Result<SchemeSpec> parse_scheme_spec(const std::string& spec);

}  // namespace agentkv
