#include "adapter/adapter_identity.h"

// The state struct is only public with XXH_STATIC_LINKING_ONLY; stack-allocating it avoids a heap round trip.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <string_view>


namespace agentkv {
namespace {

void update_u64(XXH3_state_t* st, uint64_t v) { XXH3_128bits_update(st, &v, sizeof v); }

void update_str(XXH3_state_t* st, std::string_view s) {
  update_u64(st, s.size());
  XXH3_128bits_update(st, s.data(), s.size());
}

std::string hex_digest(XXH3_state_t* st) {
  const XXH128_hash_t h = XXH3_128bits_digest(st);
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return std::string(hex);
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
  return hex_digest(&st);
}

std::string adapter_v_a_id(const Adapter& a) {
  XXH3_state_t st;
  XXH3_128bits_reset(&st);
  update_str(&st, "agentkv-v-proj-a-v1");
  bool any = false;
  for (const LoraLayer& l : a.layers) {
    const LoraMatrix& m = l.at(LoraTarget::kV);
    update_u64(&st, static_cast<uint64_t>(m.rank));
    update_u64(&st, static_cast<uint64_t>(m.d_in));
    if (m.a.empty()) continue;
    any = true;
    XXH3_128bits_update(&st, m.a.data(), m.a.size() * sizeof(float));
  }
  return any ? hex_digest(&st) : std::string();
}

bool adapter_v_a_equal(const Adapter& x, const Adapter& y) {
  if (x.layers.size() != y.layers.size()) return false;
  for (size_t i = 0; i < x.layers.size(); ++i) {
    const LoraMatrix& a = x.layers[i].at(LoraTarget::kV);
    const LoraMatrix& b = y.layers[i].at(LoraTarget::kV);
    if (a.rank != b.rank || a.d_in != b.d_in || a.a.size() != b.a.size()) return false;
    if (!a.a.empty() && std::memcmp(a.a.data(), b.a.data(), a.a.size() * sizeof(float)) != 0) return false;
  }
  return true;
}

}  // namespace agentkv
