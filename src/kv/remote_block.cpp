#include "kv/remote_block.h"

#include <cstdio>
#include <cstring>

#include "util/hash.h"

namespace agentkv {
namespace {

constexpr char kMagic[4] = {'A', 'K', 'V', 'B'};
constexpr char kRefMagic[4] = {'A', 'K', 'V', 'S'};
constexpr uint32_t kVersion = 1;

template <typename T>
void put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, arm64)
  out->append(b, sizeof(T));
}

struct Reader {
  std::string_view s;
  size_t at = 0;
  template <typename T>
  bool get(T* v) {
    if (s.size() - at < sizeof(T)) return false;
    std::memcpy(v, s.data() + at, sizeof(T));
    at += sizeof(T);
    return true;
  }
  bool bytes(size_t n, std::string_view* out) {
    if (s.size() - at < n) return false;
    *out = s.substr(at, n);
    at += n;
    return true;
  }
};

}  // namespace

uint64_t remote_model_tag(std::string_view model_id, int32_t n_layers, int32_t kv_heads, int32_t head_dim,
                          int32_t block_size, std::string_view dtype) {
  std::string b(model_id);
  put(&b, n_layers);
  put(&b, kv_heads);
  put(&b, head_dim);
  put(&b, block_size);
  b.append(dtype);
  return hash_bytes(b.data(), b.size());
}

namespace {

std::string name(const char* kind, uint64_t model_tag, const ExtraKeys& keys, uint64_t hash) {
  ExtraKeys ns;
  ns.tenant = keys.tenant;
  ns.cache_salt = keys.cache_salt;
  const std::string n = ns.serialize();
  char buf[96];
  std::snprintf(buf, sizeof buf, "akv:1:%016llx:%016llx:%s%016llx",
                static_cast<unsigned long long>(model_tag),
                static_cast<unsigned long long>(hash_bytes(n.data(), n.size())), kind,
                static_cast<unsigned long long>(hash));
  return buf;
}

}  // namespace

std::string remote_block_name(uint64_t model_tag, const ExtraKeys& keys, uint64_t hash) {
  return name("", model_tag, keys, hash);
}

std::string remote_segment_name(uint64_t model_tag, const ExtraKeys& keys, uint64_t segment_hash) {
  return name("s:", model_tag, keys, segment_hash);
}

std::string encode_remote_segment_ref(uint64_t model_tag, uint64_t segment_hash,
                                      const RemoteSegmentRef& ref) {
  std::string out(kRefMagic, 4);
  put(&out, kVersion);
  put(&out, model_tag);
  put(&out, segment_hash);
  put(&out, ref.hash);
  put(&out, ref.parent_hash);
  put(&out, ref.pos);
  return out;
}

std::optional<RemoteSegmentRef> decode_remote_segment_ref(std::string_view value, uint64_t model_tag,
                                                          uint64_t segment_hash) {
  Reader r{value};
  std::string_view magic;
  uint32_t version = 0;
  uint64_t tag = 0, seg = 0;
  RemoteSegmentRef ref;
  if (!r.bytes(4, &magic) || magic != std::string_view(kRefMagic, 4) || !r.get(&version) ||
      version != kVersion || !r.get(&tag) || tag != model_tag || !r.get(&seg) || seg != segment_hash ||
      !r.get(&ref.hash) || !r.get(&ref.parent_hash) || !r.get(&ref.pos) || ref.pos < 0 ||
      r.at != value.size()) {
    return std::nullopt;
  }
  return ref;
}

std::string encode_remote_block(const RemoteBlockKey& k, std::span<const uint8_t> payload) {
  std::string out;
  out.reserve(64 + k.tokens.size() * 4 + k.extra.size() + payload.size());
  out.append(kMagic, 4);
  put(&out, kVersion);
  put(&out, k.model_tag);
  put(&out, k.hash);
  put(&out, k.parent_hash);
  put(&out, static_cast<uint32_t>(k.tokens.size()));
  for (int32_t t : k.tokens) put(&out, t);
  put(&out, static_cast<uint32_t>(k.extra.size()));
  out.append(k.extra);
  put(&out, static_cast<uint64_t>(payload.size()));
  put(&out, hash_bytes(payload.data(), payload.size()));
  out.append(reinterpret_cast<const char*>(payload.data()), payload.size());
  return out;
}

std::optional<std::span<const uint8_t>> decode_remote_block(std::string_view value, const RemoteBlockKey& k,
                                                            size_t payload_bytes) {
  Reader r{value};
  std::string_view magic, extra, payload;
  uint32_t version = 0, n_tokens = 0, extra_len = 0;
  uint64_t tag = 0, hash = 0, parent = 0, len = 0, sum = 0;
  if (!r.bytes(4, &magic) || magic != std::string_view(kMagic, 4) || !r.get(&version) || version != kVersion ||
      !r.get(&tag) || tag != k.model_tag || !r.get(&hash) || hash != k.hash || !r.get(&parent) ||
      parent != k.parent_hash || !r.get(&n_tokens) || n_tokens != k.tokens.size()) {
    return std::nullopt;
  }
  for (int32_t want : k.tokens) {
    int32_t t = 0;
    if (!r.get(&t) || t != want) return std::nullopt;
  }
  if (!r.get(&extra_len) || !r.bytes(extra_len, &extra) || extra != k.extra || !r.get(&len) || len != payload_bytes ||
      !r.get(&sum) || !r.bytes(payload_bytes, &payload) || r.at != value.size() ||
      hash_bytes(payload.data(), payload.size()) != sum) {
    return std::nullopt;
  }
  return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
}

}  // namespace agentkv
