// GGUF reader (versions 2 and 3). Knows nothing of models: it exposes the
// metadata key/values and the tensor table of a file, after checking every
// count, length, offset and size against the file size and against overflow.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/ggml_type.h"
#include "util/mmap.h"
#include "util/status.h"

namespace agentkv {

// On-disk metadata value type ids (gguf.h `enum gguf_type`).
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

const char* gguf_type_name(GgufType t);

// One metadata value. Scalars live in the matching field; arrays hold their
// element type and elements (which may themselves be arrays).
struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t u = 0;                         // kUint*, kBool
  int64_t i = 0;                          // kInt*
  double f = 0;                           // kFloat*
  std::string s;                          // kString
  GgufType elem_type = GgufType::kUint8;  // kArray
  std::vector<GgufValue> arr;             // kArray

  // Builders, mostly for GgufWriter users: of_uint(GgufType::kUint32, 7).
  static GgufValue of_uint(GgufType t, uint64_t v);
  static GgufValue of_int(GgufType t, int64_t v);
  static GgufValue of_float(GgufType t, double v);
  static GgufValue of_bool(bool v);
  static GgufValue of_string(std::string v);
  static GgufValue of_array(GgufType elem_type, std::vector<GgufValue> elems);
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // dimensions, ggml order: ne[0] is contiguous
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
};

class GgufFile {
 public:
  // Maps and parses a file. Every error message names the problem.
  static Result<GgufFile> open(const std::string& path);
  // Parses bytes that stay owned by the caller and must outlive the result
  // (tests and fuzzing).
  static Result<GgufFile> parse(std::span<const uint8_t> bytes);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }
  // Start of the data section in the file (tensor offsets are relative to it).
  uint64_t data_offset() const { return data_offset_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>>& kvs() const { return kvs_; }
  const GgufValue* find(std::string_view key) const;

  // Typed getters: error if the key is missing or has another type. Integer
  // getters accept any integer type whose value fits.
  Result<std::string> get_string(std::string_view key) const;
  Result<uint64_t> get_uint(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;  // any float type
  Result<bool> get_bool(std::string_view key) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  Result<std::vector<double>> get_float_array(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // The tensor's bytes (already bounds-checked at parse time).
  std::span<const uint8_t> tensor_data(const GgufTensorInfo& t) const;

 private:
  std::shared_ptr<MappedFile> file_;  // null when parsed from caller memory
  std::span<const uint8_t> bytes_;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds GGUF files: used by tests (including deliberately bad files) and by
// `agentkv synth-model`.
class GgufWriter {
 public:
  void set_version(uint32_t v) { version_ = v; }
  void set_alignment(uint64_t a) { alignment_ = a; }

  void add_kv(std::string key, GgufValue value);
  void add_string(std::string key, std::string v);
  void add_uint32(std::string key, uint32_t v);
  void add_uint64(std::string key, uint64_t v);
  void add_int32(std::string key, int32_t v);
  void add_float32(std::string key, float v);
  void add_bool(std::string key, bool v);
  void add_string_array(std::string key, const std::vector<std::string>& v);
  void add_int32_array(std::string key, const std::vector<int32_t>& v);
  void add_float32_array(std::string key, const std::vector<float>& v);

  // `data` must already be encoded in `type`; ne in ggml order.
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, std::vector<uint8_t> data);
  void add_tensor_f32(std::string name, std::vector<int64_t> ne, const std::vector<float>& data);

  std::vector<uint8_t> to_bytes() const;
  Status write(const std::string& path) const;

 private:
  uint32_t version_ = 3;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };
  std::vector<Tensor> tensors_;
};

}  // namespace agentkv
