// Metadata lookup and the typed getters of GgufFile.
#include <limits>

#include "format/gguf.h"

namespace agentkv {

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
      return "u8";
    case GgufType::kInt8:
      return "i8";
    case GgufType::kUint16:
      return "u16";
    case GgufType::kInt16:
      return "i16";
    case GgufType::kUint32:
      return "u32";
    case GgufType::kInt32:
      return "i32";
    case GgufType::kFloat32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "u64";
    case GgufType::kInt64:
      return "i64";
    case GgufType::kFloat64:
      return "f64";
  }
  return "unknown";
}

namespace {

bool is_unsigned(GgufType t) {
  return t == GgufType::kUint8 || t == GgufType::kUint16 || t == GgufType::kUint32 || t == GgufType::kUint64;
}
bool is_signed(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 || t == GgufType::kInt64;
}
bool is_float(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }

Status wrong_type(std::string_view key, const GgufValue& v, const char* expected) {
  std::string got = gguf_type_name(v.type);
  if (v.type == GgufType::kArray) got += std::string(" of ") + gguf_type_name(v.elem_type);
  return make_error(ErrorCode::kInvalidArgument, "key '", key, "' has type ", got, ", expected ", expected);
}

Result<int64_t> as_int(std::string_view key, const GgufValue& v) {
  if (is_signed(v.type)) return v.i;
  if (is_unsigned(v.type) && v.u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(v.u);
  }
  if (is_unsigned(v.type))
    return make_error(ErrorCode::kOutOfRange, "key '", key, "': value ", v.u, " does not fit int64");
  return wrong_type(key, v, "an integer");
}

}  // namespace

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

#define AKV_FIND_OR_RETURN(v, key) \
  const GgufValue* v = find(key);  \
  if (!v) return make_error(ErrorCode::kNotFound, "key '", key, "' not found")

Result<std::string> GgufFile::get_string(std::string_view key) const {
  AKV_FIND_OR_RETURN(v, key);
  if (v->type != GgufType::kString) return wrong_type(key, *v, "string");
  return v->s;
}

Result<uint64_t> GgufFile::get_uint(std::string_view key) const {
  AKV_FIND_OR_RETURN(v, key);
  if (is_unsigned(v->type)) return v->u;
  if (is_signed(v->type) && v->i >= 0) return static_cast<uint64_t>(v->i);
  if (is_signed(v->type))
    return make_error(ErrorCode::kOutOfRange, "key '", key, "': value ", v->i, " is negative");
  return wrong_type(key, *v, "an unsigned integer");
}

Result<int64_t> GgufFile::get_int(std::string_view key) const {
  AKV_FIND_OR_RETURN(v, key);
  return as_int(key, *v);
}

Result<double> GgufFile::get_float(std::string_view key) const {
  AKV_FIND_OR_RETURN(v, key);
  if (!is_float(v->type)) return wrong_type(key, *v, "a float");
  return v->f;
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  AKV_FIND_OR_RETURN(v, key);
  if (v->type != GgufType::kBool) return wrong_type(key, *v, "bool");
  return v->u != 0;
}

Result<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  AKV_FIND_OR_RETURN(v, key);
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString)
    return wrong_type(key, *v, "array of string");
  std::vector<std::string> out;
  out.reserve(v->arr.size());
  for (const GgufValue& e : v->arr) out.push_back(e.s);
  return out;
}

Result<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  AKV_FIND_OR_RETURN(v, key);
  if (v->type != GgufType::kArray || !(is_signed(v->elem_type) || is_unsigned(v->elem_type))) {
    return wrong_type(key, *v, "array of integer");
  }
  std::vector<int64_t> out;
  out.reserve(v->arr.size());
  for (const GgufValue& e : v->arr) {
    AKV_ASSIGN_OR_RETURN(int64_t x, as_int(key, e));
    out.push_back(x);
  }
  return out;
}

Result<std::vector<double>> GgufFile::get_float_array(std::string_view key) const {
  AKV_FIND_OR_RETURN(v, key);
  if (v->type != GgufType::kArray || !is_float(v->elem_type)) return wrong_type(key, *v, "array of float");
  std::vector<double> out;
  out.reserve(v->arr.size());
  for (const GgufValue& e : v->arr) out.push_back(e.f);
  return out;
}

#undef AKV_FIND_OR_RETURN

}  // namespace agentkv
