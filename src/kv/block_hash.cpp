#include "kv/block_hash.h"

#include <cstring>

#include "util/hash.h"

namespace agentkv {
namespace {

void put_u32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_key(std::string* out, ExtraKeyKind kind, const std::string& bytes) {
  out->push_back(static_cast<char>(kind));
  put_u32(out, static_cast<uint32_t>(bytes.size()));
  out->append(bytes);
}

}  // namespace

std::string ExtraKeys::serialize() const {
  std::string out;
  out.reserve(15 + lineage.size() + tenant.size() + cache_salt.size());
  put_key(&out, ExtraKeyKind::kLineage, lineage);
  put_key(&out, ExtraKeyKind::kTenant, tenant);
  put_key(&out, ExtraKeyKind::kCacheSalt, cache_salt);
  if (approximate) put_key(&out, ExtraKeyKind::kApproximate, "");
  return out;
}

std::optional<ExtraKeys> ExtraKeys::parse(std::string_view bytes) {
  size_t at = 0;
  // One key of `kind`; false when the bytes do not hold one there.
  auto take = [&](ExtraKeyKind kind, std::string* out) {
    if (bytes.size() - at < 5 || static_cast<uint8_t>(bytes[at]) != static_cast<uint8_t>(kind)) return false;
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= uint32_t{static_cast<uint8_t>(bytes[at + 1 + i])} << (8 * i);
    if (bytes.size() - at - 5 < n) return false;
    out->assign(bytes.substr(at + 5, n));
    at += 5 + n;
    return true;
  };
  ExtraKeys k;
  if (!take(ExtraKeyKind::kLineage, &k.lineage) || !take(ExtraKeyKind::kTenant, &k.tenant) ||
      !take(ExtraKeyKind::kCacheSalt, &k.cache_salt)) {
    return std::nullopt;
  }
  if (at < bytes.size()) {
    std::string none;
    if (!take(ExtraKeyKind::kApproximate, &none) || !none.empty()) return std::nullopt;
    k.approximate = true;
  }
  if (at != bytes.size()) return std::nullopt;
  return k;
}

uint64_t hash_block(uint64_t parent, std::span<const int32_t> tokens, std::string_view extra) {
  // parent(u64) | n_tokens(u32) | tokens(i32 each) | extra: the token count is
  // written so token bytes and key bytes cannot trade places.
  std::string buf;
  buf.resize(12 + tokens.size() * 4);
  std::memcpy(buf.data(), &parent, 8);
  const uint32_t n = static_cast<uint32_t>(tokens.size());
  std::memcpy(buf.data() + 8, &n, 4);
  if (!tokens.empty()) std::memcpy(buf.data() + 12, tokens.data(), tokens.size() * 4);
  buf.append(extra);
  return hash_bytes(buf.data(), buf.size());
}

}  // namespace agentkv
