#include "adapter/adapter_identity.h"

// The state struct is only public with XXH_STATIC_LINKING_ONLY; stack-allocating it avoids a heap round trip.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <cstdio>
#include <string_view>


namespace agentkv {
namespace {

void update_u64(XXH3_state_t* st, uint64_t v) { XXH3_128bits_update(st, &v, sizeof v); }

void update_str(XXH3_state_t* st, std::string_view s) {
  update_u64(st, s.size());
  XXH3_128bits_update(st, s.data(), s.size());
}

}  // namespace

std::string adapter_content_id(AdapterKind kind, const std::vector<AdapterFileBytes>& files) {
  XXH3_state_t st;  // a plain struct in xxhash >= 0.8 (no allocation)
  XXH3_128bits_reset(&st);
  update_str(&st, "agentkv-adapter-v1");
  update_str(&st, adapter_kind_name(kind));
  for (const auto& [name, bytes] : files) {
    update_str(&st, name);
    update_u64(&st, bytes.size());
    if (!bytes.empty()) XXH3_128bits_update(&st, bytes.data(), bytes.size());
  }
  const XXH128_hash_t h = XXH3_128bits_digest(&st);
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return std::string(hex);
}

}  // namespace agentkv
