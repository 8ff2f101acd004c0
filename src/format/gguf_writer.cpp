// GgufWriter: serialises metadata and tensors in the layout GgufFile reads.
// It writes what it is given without validation, so tests can build
// deliberately bad files (5 dimensions, too little data, alignment 0).
#include <cstdio>
#include <cstring>

#include "format/gguf.h"

namespace agentkv {

GgufValue GgufValue::of_uint(GgufType t, uint64_t v) {
  GgufValue x;
  x.type = t;
  x.u = v;
  return x;
}
GgufValue GgufValue::of_int(GgufType t, int64_t v) {
  GgufValue x;
  x.type = t;
  x.i = v;
  return x;
}
GgufValue GgufValue::of_float(GgufType t, double v) {
  GgufValue x;
  x.type = t;
  x.f = v;
  return x;
}
GgufValue GgufValue::of_bool(bool v) { return of_uint(GgufType::kBool, v ? 1 : 0); }
GgufValue GgufValue::of_string(std::string v) {
  GgufValue x;
  x.type = GgufType::kString;
  x.s = std::move(v);
  return x;
}
GgufValue GgufValue::of_array(GgufType elem_type, std::vector<GgufValue> elems) {
  GgufValue x;
  x.type = GgufType::kArray;
  x.elem_type = elem_type;
  x.arr = std::move(elems);
  return x;
}

namespace {

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void put(T v) {
    const size_t at = out_->size();
    out_->resize(at + sizeof v);
    std::memcpy(out_->data() + at, &v, sizeof v);
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_->insert(out_->end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    if (alignment == 0) return;
    out_->resize((out_->size() + alignment - 1) / alignment * alignment, 0);
  }
  // Writes v's payload encoded as `type` (array elements use the array's
  // element type, whatever their own `type` field says).
  void put_value(GgufType type, const GgufValue& v) {
    switch (type) {
      case GgufType::kUint8:
        put<uint8_t>(static_cast<uint8_t>(v.u));
        break;
      case GgufType::kUint16:
        put<uint16_t>(static_cast<uint16_t>(v.u));
        break;
      case GgufType::kUint32:
        put<uint32_t>(static_cast<uint32_t>(v.u));
        break;
      case GgufType::kUint64:
        put<uint64_t>(v.u);
        break;
      case GgufType::kInt8:
        put<int8_t>(static_cast<int8_t>(v.i));
        break;
      case GgufType::kInt16:
        put<int16_t>(static_cast<int16_t>(v.i));
        break;
      case GgufType::kInt32:
        put<int32_t>(static_cast<int32_t>(v.i));
        break;
      case GgufType::kInt64:
        put<int64_t>(v.i);
        break;
      case GgufType::kFloat32:
        put<float>(static_cast<float>(v.f));
        break;
      case GgufType::kFloat64:
        put<double>(v.f);
        break;
      case GgufType::kBool:
        put<uint8_t>(v.u ? 1 : 0);
        break;
      case GgufType::kString:
        put_string(v.s);
        break;
      case GgufType::kArray:
        put<uint32_t>(static_cast<uint32_t>(v.elem_type));
        put<uint64_t>(v.arr.size());
        for (const GgufValue& e : v.arr) put_value(v.elem_type, e);
        break;
    }
  }

 private:
  std::vector<uint8_t>* out_;
};

}  // namespace

void GgufWriter::add_kv(std::string key, GgufValue value) {
  kvs_.emplace_back(std::move(key), std::move(value));
}
void GgufWriter::add_string(std::string key, std::string v) {
  add_kv(std::move(key), GgufValue::of_string(std::move(v)));
}
void GgufWriter::add_uint32(std::string key, uint32_t v) {
  add_kv(std::move(key), GgufValue::of_uint(GgufType::kUint32, v));
}
void GgufWriter::add_uint64(std::string key, uint64_t v) {
  add_kv(std::move(key), GgufValue::of_uint(GgufType::kUint64, v));
}
void GgufWriter::add_int32(std::string key, int32_t v) {
  add_kv(std::move(key), GgufValue::of_int(GgufType::kInt32, v));
}
void GgufWriter::add_float32(std::string key, float v) {
  add_kv(std::move(key), GgufValue::of_float(GgufType::kFloat32, v));
}
void GgufWriter::add_bool(std::string key, bool v) { add_kv(std::move(key), GgufValue::of_bool(v)); }

void GgufWriter::add_string_array(std::string key, const std::vector<std::string>& v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (const std::string& s : v) elems.push_back(GgufValue::of_string(s));
  add_kv(std::move(key), GgufValue::of_array(GgufType::kString, std::move(elems)));
}

void GgufWriter::add_int32_array(std::string key, const std::vector<int32_t>& v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (int32_t x : v) elems.push_back(GgufValue::of_int(GgufType::kInt32, x));
  add_kv(std::move(key), GgufValue::of_array(GgufType::kInt32, std::move(elems)));
}

void GgufWriter::add_float32_array(std::string key, const std::vector<float>& v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (float x : v) elems.push_back(GgufValue::of_float(GgufType::kFloat32, x));
  add_kv(std::move(key), GgufValue::of_array(GgufType::kFloat32, std::move(elems)));
}

void GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                            std::vector<uint8_t> data) {
  tensors_.push_back({std::move(name), type, std::move(ne), std::move(data)});
}

void GgufWriter::add_tensor_f32(std::string name, std::vector<int64_t> ne, const std::vector<float>& data) {
  std::vector<uint8_t> bytes(data.size() * sizeof(float));
  if (!data.empty()) std::memcpy(bytes.data(), data.data(), bytes.size());
  add_tensor(std::move(name), GgmlType::kF32, std::move(ne), std::move(bytes));
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  // A reader only knows a non-default alignment from the key, so add it
  // unless the caller set one (possibly a bad one, on purpose).
  bool has_alignment_key = false;
  for (const auto& kv : kvs_) has_alignment_key = has_alignment_key || kv.first == "general.alignment";
  const bool add_alignment_key = !has_alignment_key && alignment_ != 32;

  std::vector<uint8_t> out;
  ByteSink w(&out);
  w.put<uint32_t>(0x46554747);  // "GGUF" little-endian
  w.put<uint32_t>(version_);
  w.put<uint64_t>(tensors_.size());
  w.put<uint64_t>(kvs_.size() + (add_alignment_key ? 1 : 0));
  for (const auto& [key, value] : kvs_) {
    w.put_string(key);
    w.put<uint32_t>(static_cast<uint32_t>(value.type));
    w.put_value(value.type, value);
  }
  if (add_alignment_key) {
    w.put_string("general.alignment");
    w.put<uint32_t>(static_cast<uint32_t>(GgufType::kUint32));
    w.put<uint32_t>(static_cast<uint32_t>(alignment_));
  }
  const uint64_t align = alignment_ ? alignment_ : 1;
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    w.put_string(t.name);
    w.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) w.put<int64_t>(d);
    w.put<uint32_t>(static_cast<uint32_t>(t.type));
    w.put<uint64_t>(offset);
    offset = (offset + t.data.size() + align - 1) / align * align;
  }
  w.pad_to(align);
  for (const Tensor& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    w.pad_to(align);
  }
  return out;
}

Status GgufWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return make_error(ErrorCode::kIo, path, ": cannot create: ", std::strerror(errno));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) return make_error(ErrorCode::kIo, path, ": write failed");
  return Status::ok();
}

}  // namespace agentkv
