// Profiles found by model: a directory of relay and DroidSpeak profiles
// (profiles/ in the repository: *.relay.json, *.droidspeak.json), searched
// for the one measured on the model being served, so that `serve` runs
// kv_sharing relay and droidspeak without being told which file to load.
#pragma once

#include <string>
#include <string_view>

namespace agentkv {

// The first file of `dir` (by name) ending in `suffix` whose "format" is
// `format` and whose model.id is `model_id`; "" when there is none or `dir`
// does not exist. Files that are not JSON, or are for another model, are
// passed over: the loader of the file found checks the rest (its layers).
std::string find_profile(const std::string& dir, std::string_view suffix, std::string_view format,
                         std::string_view model_id);

// The two kinds: their file suffixes and format names.
inline constexpr std::string_view kRelayProfileSuffix = ".relay.json";
inline constexpr const char* kRelayProfileFormat = "agentkv-relay-profile";
inline constexpr std::string_view kDroidspeakProfileSuffix = ".droidspeak.json";
inline constexpr const char* kDroidspeakProfileFormat = "agentkv-droidspeak-profile";

}  // namespace agentkv
