#include "util/file_id.h"

#include <xxhash.h>

#include <cstdio>
#include <memory>
#include <vector>

namespace agentkv {

Result<std::string> file_content_id(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) return make_error(ErrorCode::kIo, "cannot open '", path, "'");
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> st(XXH3_createState(), XXH3_freeState);
  if (!st || XXH3_128bits_reset(st.get()) != XXH_OK) return make_error(ErrorCode::kInternal, "xxhash state");
  std::vector<unsigned char> buf(1 << 20);
  for (;;) {
    const size_t n = std::fread(buf.data(), 1, buf.size(), f.get());
    if (n > 0) XXH3_128bits_update(st.get(), buf.data(), n);
    if (n < buf.size()) break;
  }
  if (std::ferror(f.get())) return make_error(ErrorCode::kIo, "cannot read '", path, "'");
  const XXH128_hash_t h = XXH3_128bits_digest(st.get());
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return std::string(hex);
}

}  // namespace agentkv
