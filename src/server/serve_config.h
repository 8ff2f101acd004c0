// The adapter and KV-sharing settings of `agentkv serve`, as the command line
// (--adapter NAME=PATH[:kind], --kv-sharing SCHEME) and the --config JSON
// ("adapters": [...], "kv_sharing": "...") give them. Parsed here, apart from
// the CLI, so the rules are unit-tested.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agentkv/serving.h"
#include "util/status.h"

namespace agentkv::server {

using AdapterSpec = ServingOptions::AdapterSpec;

// "NAME=PATH[:kind]". The name is everything before the first '='; only a
// final ":lora", ":alora" or ":icarus" is a kind, so a path may contain ':'
// (a path that itself ends in ":lora" is written "NAME=PATH:lora:KIND").
Result<AdapterSpec> parse_adapter_spec(std::string_view spec);

// The config file's adapters: an array whose items are "NAME=PATH[:kind]"
// strings or {"name": .., "path": .., "kind": ..} objects (kind optional), or
// one such item alone.
Result<std::vector<AdapterSpec>> adapter_specs_from_json(const nlohmann::json& v);

// Every name non-empty, unique and not the base model's served name; every
// path non-empty; every kind "" or known.
Status check_adapter_specs(const std::vector<AdapterSpec>& specs, const std::string& base_name);

// none, alora or icarus.
Status check_kv_sharing(const std::string& scheme);

}  // namespace agentkv::server
