// Per-model defaults of the schemes' parameters. The built-in defaults
// (scheme.h) were chosen on one model; a defaults file, measured on the model
// being served, names each scheme's setting chosen from that model's own
// fidelity curve (tools/scheme_defaults.py applies the rule to a
// bench-fidelity run; profiles/<model>.defaults.json). `serve` finds it by
// model id in --profile-dir, or is given one with --scheme-defaults.
//
// Precedence of a request's parameter: the request's own, then the server's
// options (--reuse-ratio ..., and the layers of relay's and droidspeak's
// profiles), then this file's entry for the request's scheme, then the
// scheme's built-in default. A file names no layers: those are the
// profiles'.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "agentkv/kv_sharing_params.h"
#include "util/status.h"

namespace agentkv {

inline constexpr std::string_view kSchemeDefaultsSuffix = ".defaults.json";
inline constexpr const char* kSchemeDefaultsFormat = "agentkv-scheme-defaults";

// scheme name (as sharing_scheme_find knows it; no compositions) -> its
// parameters. Only the scheme's own fields are set.
using SchemeDefaults = std::map<std::string, KvSharingParams, std::less<>>;

// The file at `path`, checked: its format, that it was measured on the model
// whose content id is `model_id`, and that each entry names a known scheme
// with parameters that scheme takes (SharingScheme::check_params). An error
// names the file and what is wrong.
Result<SchemeDefaults> load_scheme_defaults(const std::string& path, std::string_view model_id);

class SharingScheme;
// A request's parameters by the precedence above: `request`'s own, then
// `server`'s, then `defaults`' entry for the scheme whose parameters `scheme`
// takes (a composition: its segment-reuse part). Unset after that: the
// scheme's built-in default, which its planner applies.
KvSharingParams resolve_params(const KvSharingParams& request, const KvSharingParams& server,
                               const SchemeDefaults& defaults, const SharingScheme& scheme);

}  // namespace agentkv
