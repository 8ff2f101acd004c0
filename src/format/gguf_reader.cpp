// GgufFile::parse / open: the GGUF v2/v3 layout is
//   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
//   n_kv x (string key, u32 value type, value),
//   n_tensors x (string name, u32 n_dims, i64 ne[n_dims], u32 type, u64 offset),
//   padding to `general.alignment` (default 32), then the data section.
// Nothing is allocated or indexed from a count until the count has been
// checked against the bytes that remain, so a hostile header fails fast.
#include <cstdio>
#include <cstring>
#include <string>

#include "format/gguf.h"
#include "format/gguf_cursor.h"
#include "format/gguf_limits.h"

namespace agentkv {
namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// The fewest bytes one element of a metadata type occupies on disk; used to
// reject counts the rest of the file cannot possibly hold.
Result<uint64_t> min_value_bytes(uint32_t type) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return uint64_t{1};
    case GgufType::kUint16:
    case GgufType::kInt16:
      return uint64_t{2};
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return uint64_t{4};
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
    case GgufType::kString:
      return uint64_t{8};  // a string is at least its length
    case GgufType::kArray:
      return uint64_t{12};  // element type + count
  }
  return make_error(ErrorCode::kParse, "unknown metadata value type ", type);
}

struct ValueParser {
  GgufCursor& c;
  uint64_t array_elems = 0;  // across the whole file, against kGgufMaxArrayElements

  template <typename T, typename U>
  Status scalar(U* out) {
    T x{};
    AKV_RETURN_IF_ERROR(c.read(&x, "metadata value"));
    *out = static_cast<U>(x);
    return Status::ok();
  }

  Status parse(uint32_t type_id, int depth, GgufValue* v) {
    AKV_RETURN_IF_ERROR(min_value_bytes(type_id).status());
    v->type = static_cast<GgufType>(type_id);
    switch (v->type) {
      case GgufType::kUint8:
        return scalar<uint8_t>(&v->u);
      case GgufType::kUint16:
        return scalar<uint16_t>(&v->u);
      case GgufType::kUint32:
        return scalar<uint32_t>(&v->u);
      case GgufType::kUint64:
        return scalar<uint64_t>(&v->u);
      case GgufType::kInt8:
        return scalar<int8_t>(&v->i);
      case GgufType::kInt16:
        return scalar<int16_t>(&v->i);
      case GgufType::kInt32:
        return scalar<int32_t>(&v->i);
      case GgufType::kInt64:
        return scalar<int64_t>(&v->i);
      case GgufType::kFloat32:
        return scalar<float>(&v->f);
      case GgufType::kFloat64:
        return scalar<double>(&v->f);
      case GgufType::kBool:
        AKV_RETURN_IF_ERROR(scalar<uint8_t>(&v->u));
        if (v->u > 1) {
          return make_error(ErrorCode::kParse, "invalid bool value ", v->u, " at offset ", c.pos() - 1);
        }
        return Status::ok();
      case GgufType::kString:
        return c.read_string(&v->s, "metadata string");
      case GgufType::kArray:
        return parse_array(depth, v);
    }
    return Status::ok();
  }

  Status parse_array(int depth, GgufValue* v) {
    if (depth >= kGgufMaxArrayDepth) {
      return make_error(ErrorCode::kParse, "arrays nested deeper than ", kGgufMaxArrayDepth, " levels");
    }
    uint32_t elem_type = 0;
    uint64_t count = 0;
    AKV_RETURN_IF_ERROR(c.read(&elem_type, "array element type"));
    AKV_ASSIGN_OR_RETURN(uint64_t min_bytes, min_value_bytes(elem_type));
    AKV_RETURN_IF_ERROR(c.read(&count, "array length"));
    if (count > c.remaining() / min_bytes) {
      return make_error(ErrorCode::kOutOfRange, "array of ", count, " ", gguf_type_name(GgufType{elem_type}),
                        " at offset ", c.pos() - 8, " exceeds the ", c.remaining(),
                        " bytes left in the file");
    }
    if (count > kGgufMaxArrayElements - array_elems) {
      return make_error(ErrorCode::kResourceExhausted, "metadata arrays hold more than ",
                        kGgufMaxArrayElements, " elements in total");
    }
    array_elems += count;
    v->elem_type = static_cast<GgufType>(elem_type);
    v->arr.resize(static_cast<size_t>(count));
    for (GgufValue& e : v->arr) AKV_RETURN_IF_ERROR(parse(elem_type, depth + 1, &e));
    return Status::ok();
  }
};

Status check_alignment(const GgufValue& v, uint64_t* alignment) {
  uint64_t a = 0;
  switch (v.type) {
    case GgufType::kUint8:
    case GgufType::kUint16:
    case GgufType::kUint32:
    case GgufType::kUint64:
      a = v.u;
      break;
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64:
      if (v.i <= 0)
        return make_error(ErrorCode::kParse, "general.alignment must be a nonzero power of two, got ", v.i);
      a = static_cast<uint64_t>(v.i);
      break;
    default:
      return make_error(ErrorCode::kParse, "general.alignment must be an integer, got ",
                        gguf_type_name(v.type));
  }
  if (a == 0 || (a & (a - 1)) != 0) {
    return make_error(ErrorCode::kParse, "general.alignment must be a nonzero power of two, got ", a);
  }
  *alignment = a;
  return Status::ok();
}

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// Reads one tensor info and checks everything that does not depend on where
// the data section starts.
Status parse_tensor_info(GgufCursor& c, uint64_t alignment, GgufTensorInfo* t) {
  AKV_RETURN_IF_ERROR(c.read_string(&t->name, "tensor name"));
  const std::string who = "tensor " + quoted_name(t->name);
  uint32_t n_dims = 0;
  AKV_RETURN_IF_ERROR(c.read(&n_dims, "tensor n_dims"));
  if (n_dims > kMaxDims) {
    return make_error(ErrorCode::kParse, who, ": n_dims ", n_dims, " exceeds the maximum of ", kMaxDims);
  }
  t->ne.resize(n_dims);
  int64_t n_elements = 1;
  bool overflow = false;
  for (uint32_t d = 0; d < n_dims; ++d) {
    AKV_RETURN_IF_ERROR(c.read(&t->ne[d], "tensor dimension"));
    if (t->ne[d] <= 0) {
      return make_error(ErrorCode::kParse, who, ": dimension ", d, " is ", t->ne[d], " (must be positive)");
    }
    overflow = overflow || __builtin_mul_overflow(n_elements, t->ne[d], &n_elements);
  }
  if (overflow) {
    return make_error(ErrorCode::kOutOfRange, who, ": element count of shape ", shape_str(t->ne),
                      " overflows 64 bits");
  }
  uint32_t type_id = 0;
  AKV_RETURN_IF_ERROR(c.read(&type_id, "tensor type"));
  auto traits = ggml_type_traits(type_id);
  if (!traits) return make_error(ErrorCode::kParse, who, ": unknown type id ", type_id);
  t->type = static_cast<GgmlType>(type_id);
  AKV_RETURN_IF_ERROR(c.read(&t->offset, "tensor offset"));

  const int64_t ne0 = n_dims ? t->ne[0] : 1;
  auto row = ggml_row_bytes(t->type, ne0);
  if (!row.is_ok()) return row.status().with_context(who);
  t->n_elements = static_cast<uint64_t>(n_elements);
  if (__builtin_mul_overflow(*row, t->n_elements / static_cast<uint64_t>(ne0), &t->n_bytes)) {
    return make_error(ErrorCode::kOutOfRange, who, ": byte size of shape ", shape_str(t->ne), " ",
                      traits->name, " overflows 64 bits");
  }
  if (t->offset % alignment != 0) {
    return make_error(ErrorCode::kParse, who, ": offset ", t->offset, " is not a multiple of the alignment ",
                      alignment);
  }
  return Status::ok();
}

}  // namespace

Result<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes) {
  GgufFile f;
  f.bytes_ = bytes;
  GgufCursor c(bytes);

  uint32_t magic = 0;
  AKV_RETURN_IF_ERROR(c.read(&magic, "magic"));
  if (std::memcmp(bytes.data(), "GGUF", 4) != 0) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08x", magic);
    return make_error(ErrorCode::kParse, "bad magic ", hex, " (not a GGUF file)");
  }
  AKV_RETURN_IF_ERROR(c.read(&f.version_, "version"));
  if (f.version_ != 2 && f.version_ != 3) {
    return make_error(ErrorCode::kUnsupported, "unsupported GGUF version ", f.version_);
  }
  uint64_t n_tensors = 0, n_kv = 0;
  AKV_RETURN_IF_ERROR(c.read(&n_tensors, "tensor count"));
  AKV_RETURN_IF_ERROR(c.read(&n_kv, "metadata key count"));
  // A key/value takes at least 13 bytes (key length, type, one byte of
  // value); a tensor info at least 24 (name length, n_dims, type, offset).
  if (n_kv > c.remaining() / 13) {
    return make_error(ErrorCode::kOutOfRange, "metadata key count ", n_kv, " exceeds what the remaining ",
                      c.remaining(), " bytes can hold");
  }
  if (n_tensors > c.remaining() / 24) {
    return make_error(ErrorCode::kOutOfRange, "tensor count ", n_tensors, " exceeds what the remaining ",
                      c.remaining(), " bytes can hold");
  }

  f.alignment_ = kDefaultAlignment;
  ValueParser values{c};
  f.kvs_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    AKV_RETURN_IF_ERROR(c.read_string(&key, "metadata key"));
    if (f.kv_index_.count(key)) return make_error(ErrorCode::kParse, "duplicate key ", quoted_name(key));
    uint32_t type = 0;
    AKV_RETURN_IF_ERROR(c.read(&type, "metadata value type"));
    GgufValue v;
    Status st = values.parse(type, 0, &v);
    if (!st.is_ok()) return st.with_context("key " + quoted_name(key));
    if (key == "general.alignment") AKV_RETURN_IF_ERROR(check_alignment(v, &f.alignment_));
    f.kv_index_.emplace(key, f.kvs_.size());
    f.kvs_.emplace_back(std::move(key), std::move(v));
  }

  f.tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    AKV_RETURN_IF_ERROR(parse_tensor_info(c, f.alignment_, &t));
    if (f.tensor_index_.count(t.name))
      return make_error(ErrorCode::kParse, "duplicate tensor name ", quoted_name(t.name));
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  // pos <= size < 2^63 and alignment <= 2^63, so this cannot wrap.
  f.data_offset_ = (c.pos() + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  for (const GgufTensorInfo& t : f.tensors_) {
    uint64_t start = 0, end = 0;
    if (__builtin_add_overflow(f.data_offset_, t.offset, &start) ||
        __builtin_add_overflow(start, t.n_bytes, &end) || end > bytes.size()) {
      return make_error(ErrorCode::kOutOfRange, "tensor ", quoted_name(t.name), ": data [offset ", t.offset,
                        ", ", t.n_bytes, " bytes] extends past end of file (size ", bytes.size(), ")");
    }
  }
  return f;
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  auto mapped = MappedFile::open(path);
  if (!mapped.is_ok()) return mapped.status();
  auto file = std::make_shared<MappedFile>(std::move(mapped).value());
  auto parsed = parse(file->bytes());
  if (!parsed.is_ok()) return parsed.status().with_context(path);
  GgufFile f = std::move(parsed).value();
  f.file_ = std::move(file);
  f.path_ = path;
  return f;
}

std::span<const uint8_t> GgufFile::tensor_data(const GgufTensorInfo& t) const {
  return bytes_.subspan(static_cast<size_t>(data_offset_ + t.offset), static_cast<size_t>(t.n_bytes));
}

}  // namespace agentkv
