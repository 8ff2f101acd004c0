// The command-line flags of the scheme parameters (serve's server-wide
// defaults), one per field of kKvSharingFields: its flag, its range and a
// help text that names the schemes that read it and its default. Commands
// generate their options from this table, so a parameter a scheme gains
// gets its flag here, in one place (tests check that every field has one).
#pragma once

#include <string>
#include <vector>

namespace agentkv {

struct KvSharingFlag {
  const char* field;  // the KvSharingField's name
  const char* flag;   // "--reuse-ratio"
  double lo, hi;      // the flag's range (a list: each element's)
  std::string help;
};

// Every parameter's flag, in kKvSharingFields' order.
const std::vector<KvSharingFlag>& kv_sharing_flags();

// "0,3,7" as layers; false for anything else (an empty element, a sign, a
// number past `hi`).
bool parse_layer_list(const std::string& text, int32_t hi, std::vector<int32_t>* out);

}  // namespace agentkv
