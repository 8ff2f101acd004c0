// safetensors reader. Knows nothing of models: it exposes the tensor table
// and the __metadata__ strings of a file, after checking the header length,
// the JSON, every field's type, every shape and byte range against the file.
//
// Layout: u64 little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}
// then the data section; offsets are relative to its start. Like the
// reference implementation (huggingface/safetensors), the tensors must tile
// the data section exactly: no overlap, no holes, nothing left over.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/mmap.h"
#include "util/status.h"

namespace agentkv {

// The byte-sized dtypes of the safetensors spec. Sub-byte types (F4, F6_*)
// are rejected as unknown.
enum class SafetensorsDtype {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
};

const char* safetensors_dtype_name(SafetensorsDtype t);  // "F32"
std::optional<SafetensorsDtype> safetensors_dtype_from_name(std::string_view name);
uint64_t safetensors_dtype_size(SafetensorsDtype t);  // bytes per element

// The header may not be larger than this (the reference reader's limit).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = uint64_t{100} << 20;
// JSON nesting deeper than this is rejected before it is built (a valid
// header nests 3 levels: file object, tensor object, shape array).
inline constexpr int kSafetensorsMaxJsonDepth = 16;

struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;  // row-major, outermost first; may contain 0
  uint64_t begin = 0;          // byte range in the data section
  uint64_t end = 0;
  uint64_t n_elements = 0;
};

class SafetensorsFile {
 public:
  // Maps and parses a file. Every error message is one line naming the problem.
  static Result<SafetensorsFile> open(const std::string& path);
  // Parses bytes that stay owned by the caller and must outlive the result
  // (tests and fuzzing).
  static Result<SafetensorsFile> parse(std::span<const uint8_t> bytes);

  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return bytes_; }  // the whole file
  uint64_t header_bytes() const { return header_bytes_; }
  // Tensors in the order of their data offsets.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(std::string_view name) const;
  const std::map<std::string, std::string, std::less<>>& metadata() const { return metadata_; }

  // The tensor's bytes (bounds-checked at parse time).
  std::span<const uint8_t> tensor_data(const SafetensorsTensor& t) const;
  // The tensor converted to f32 (F32, F16, BF16); other dtypes give
  // "unsupported dtype X in tensor Y", a missing name kNotFound.
  Result<std::vector<float>> tensor_f32(std::string_view name) const;

 private:
  std::shared_ptr<MappedFile> file_;  // null when parsed from caller memory
  std::span<const uint8_t> bytes_;
  std::string path_;
  uint64_t header_bytes_ = 0;
  uint64_t data_offset_ = 0;  // 8 + header length
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string, std::less<>> metadata_;
};

}  // namespace agentkv
