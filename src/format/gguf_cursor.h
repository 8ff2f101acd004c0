// A bounds-checked little-endian reader over the bytes of a GGUF file. Every
// read fails with a one-line message naming what was being read and where,
// instead of reading past the end. Internal to format/.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "util/status.h"

namespace agentkv {

class GgufCursor {
 public:
  explicit GgufCursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return bytes_.size(); }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  Status read(T* out, std::string_view what) {
    if (remaining() < sizeof(T)) return truncated(what, sizeof(T));
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }

  // A string: u64 length, then that many bytes (not NUL-terminated).
  Status read_string(std::string* out, std::string_view what) {
    uint64_t len = 0;
    AKV_RETURN_IF_ERROR(read(&len, what));
    if (len > remaining()) {
      return make_error(ErrorCode::kOutOfRange, what, ": string length ", len, " at offset ", pos_ - 8,
                        " exceeds the ", remaining(), " bytes left in the file");
    }
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(len));
    pos_ += len;
    return Status::ok();
  }

  Status truncated(std::string_view what, uint64_t need) const {
    return make_error(ErrorCode::kParse, "unexpected end of file at offset ", pos_, " reading ", what, " (",
                      need, " bytes needed, ", remaining(), " left)");
  }

 private:
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

// A key or tensor name from the file, made safe for a one-line message:
// control bytes become \xNN and long names are cut.
inline std::string quoted_name(std::string_view name) {
  constexpr size_t kMax = 128;
  std::string out = "'";
  for (size_t i = 0; i < name.size() && i < kMax; ++i) {
    const auto ch = static_cast<unsigned char>(name[i]);
    if (ch < 0x20 || ch == 0x7f) {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[ch >> 4];
      out += kHex[ch & 15];
    } else {
      out += static_cast<char>(ch);
    }
  }
  if (name.size() > kMax) out += "...";
  return out + "'";
}

}  // namespace agentkv
