// SafetensorsFile::parse / open. The header is parsed with nlohmann::json
// under a parser callback that (a) rejects duplicate keys, which nlohmann
// would otherwise resolve silently by keeping the last, and (b) stops
// nesting past kSafetensorsMaxJsonDepth before anything deep is built. No
// exception leaves this file.
#include "format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "format/fp16.h"
#include "format/gguf_cursor.h"  // quoted_name

namespace agentkv {
namespace {

using nlohmann::json;

struct DtypeRow {
  SafetensorsDtype dtype;
  const char* name;
  uint64_t size;
};

constexpr DtypeRow kDtypes[] = {
    {SafetensorsDtype::kBool, "BOOL", 1}, {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},     {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1},
    {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1}, {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},   {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2}, {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},   {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF64, "F64", 8},   {SafetensorsDtype::kI64, "I64", 8},
    {SafetensorsDtype::kU64, "U64", 8},
};

// Thrown from the parser callback to stop parsing; caught in parse_header.
struct HeaderReject {
  std::string message;
};

// Keeps nlohmann's message but drops its "[json.exception...] " prefix and
// anything that would break the one-line rule.
std::string clean_json_error(const char* what) {
  std::string_view s(what);
  if (s.size() && s[0] == '[') {
    const size_t close = s.find("] ");
    if (close != std::string_view::npos) s.remove_prefix(close + 2);
  }
  std::string q = quoted_name(s);  // escapes control bytes, cuts at 128
  return q.substr(1, q.size() - 2);
}

std::string type_of(const json& v) { return v.type_name(); }

// Parses the header text, rejecting duplicate keys at any level and deep nesting.
Result<json> parse_header(std::string_view text) {
  std::vector<std::optional<std::set<std::string>>> stack;  // nullopt: an array
  auto cb = [&stack](int /*depth*/, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (static_cast<int>(stack.size()) >= kSafetensorsMaxJsonDepth) {
          throw HeaderReject{"header JSON nests deeper than " + std::to_string(kSafetensorsMaxJsonDepth) +
                             " levels"};
        }
        if (event == json::parse_event_t::object_start) stack.emplace_back(std::set<std::string>());
        else stack.emplace_back(std::nullopt);
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case json::parse_event_t::key:
        if (!stack.empty() && stack.back() && parsed.is_string()) {
          const std::string& k = parsed.get_ref<const std::string&>();
          if (!stack.back()->insert(k).second) throw HeaderReject{"duplicate key " + quoted_name(k) + " in header"};
        }
        break;
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb);
  } catch (const HeaderReject& r) {
    return make_error(ErrorCode::kParse, r.message);
  } catch (const json::exception& e) {
    return make_error(ErrorCode::kParse, "header is not valid JSON: ", clean_json_error(e.what()));
  } catch (const std::exception& e) {  // bad_alloc on a hostile header
    return make_error(ErrorCode::kResourceExhausted, "header JSON: ", clean_json_error(e.what()));
  }
}

Result<uint64_t> get_u64(const json& v, const std::string& who, const char* what) {
  if (!v.is_number_unsigned()) {
    if (v.is_number_integer()) return make_error(ErrorCode::kParse, who, ": ", what, " is negative");
    return make_error(ErrorCode::kParse, who, ": ", what, " must be a non-negative integer, got ", type_of(v));
  }
  return v.get<uint64_t>();
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Status parse_tensor(const std::string& name, const json& v, uint64_t data_size, SafetensorsTensor* t) {
  const std::string who = "tensor " + quoted_name(name);
  if (!v.is_object()) return make_error(ErrorCode::kParse, who, ": entry must be an object, got ", type_of(v));
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(field)) return make_error(ErrorCode::kParse, who, ": missing field '", field, "'");
  }
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
      return make_error(ErrorCode::kParse, who, ": unknown field ", quoted_name(it.key()));
  }
  t->name = name;

  const json& dt = v["dtype"];
  if (!dt.is_string()) return make_error(ErrorCode::kParse, who, ": dtype must be a string, got ", type_of(dt));
  auto dtype = safetensors_dtype_from_name(dt.get_ref<const std::string&>());
  if (!dtype) {
    return make_error(ErrorCode::kParse, "unknown dtype ", quoted_name(dt.get_ref<const std::string&>()), " in ",
                      who);
  }
  t->dtype = *dtype;

  const json& shape = v["shape"];
  if (!shape.is_array()) return make_error(ErrorCode::kParse, who, ": shape must be an array, got ", type_of(shape));
  uint64_t n = 1;
  bool overflow = false;
  for (const json& d : shape) {
    AKV_ASSIGN_OR_RETURN(uint64_t dim, get_u64(d, who, "shape dimension"));
    if (dim > static_cast<uint64_t>(INT64_MAX)) {
      return make_error(ErrorCode::kOutOfRange, who, ": shape dimension ", dim, " is too large");
    }
    t->shape.push_back(static_cast<int64_t>(dim));
    overflow = overflow || __builtin_mul_overflow(n, dim, &n);
  }
  if (overflow) {
    return make_error(ErrorCode::kOutOfRange, who, ": element count of shape ", shape_str(t->shape),
                      " overflows 64 bits");
  }
  t->n_elements = n;

  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2) {
    return make_error(ErrorCode::kParse, who, ": data_offsets must be an array of 2 integers");
  }
  AKV_ASSIGN_OR_RETURN(t->begin, get_u64(off[0], who, "data_offsets[0]"));
  AKV_ASSIGN_OR_RETURN(t->end, get_u64(off[1], who, "data_offsets[1]"));
  if (t->begin > t->end) {
    return make_error(ErrorCode::kParse, who, ": data_offsets [", t->begin, ", ", t->end, "] end before they begin");
  }
  if (t->end > data_size) {
    return make_error(ErrorCode::kOutOfRange, who, ": data_offsets [", t->begin, ", ", t->end,
                      "] extend past the data section (", data_size, " bytes)");
  }
  uint64_t need = 0;
  const bool too_big = __builtin_mul_overflow(n, safetensors_dtype_size(t->dtype), &need);
  if (too_big || need != t->end - t->begin) {
    return make_error(ErrorCode::kParse, who, ": shape ", shape_str(t->shape), " ", safetensors_dtype_name(t->dtype),
                      " needs ", too_big ? std::string("more than 2^64") : std::to_string(need),
                      " bytes, data_offsets [", t->begin, ", ", t->end, "] hold ", t->end - t->begin);
  }
  return Status::ok();
}

Status parse_metadata(const json& v, std::map<std::string, std::string, std::less<>>* out) {
  if (!v.is_object()) {
    return make_error(ErrorCode::kParse, "__metadata__ must be an object of strings, got ", type_of(v));
  }
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_string()) {
      return make_error(ErrorCode::kParse, "__metadata__ value of ", quoted_name(it.key()),
                        " must be a string, got ", type_of(it.value()));
    }
    out->emplace(it.key(), it.value().get<std::string>());
  }
  return Status::ok();
}

}  // namespace

const char* safetensors_dtype_name(SafetensorsDtype t) {
  for (const DtypeRow& r : kDtypes)
    if (r.dtype == t) return r.name;
  return "?";
}

std::optional<SafetensorsDtype> safetensors_dtype_from_name(std::string_view name) {
  for (const DtypeRow& r : kDtypes)
    if (name == r.name) return r.dtype;
  return std::nullopt;
}

uint64_t safetensors_dtype_size(SafetensorsDtype t) {
  for (const DtypeRow& r : kDtypes)
    if (r.dtype == t) return r.size;
  return 1;
}

Result<SafetensorsFile> SafetensorsFile::parse(std::span<const uint8_t> bytes) {
  SafetensorsFile f;
  f.bytes_ = bytes;
  if (bytes.size() < 8) {
    return make_error(ErrorCode::kParse, "file of ", bytes.size(),
                      " bytes is too small for a safetensors header length (8 bytes)");
  }
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8) {
    return make_error(ErrorCode::kOutOfRange, "header length ", n, " past the end of the file (size ", bytes.size(),
                      ")");
  }
  if (n > kSafetensorsMaxHeaderBytes) {
    return make_error(ErrorCode::kOutOfRange, "header length ", n, " exceeds the limit of ",
                      kSafetensorsMaxHeaderBytes, " bytes");
  }
  f.header_bytes_ = n;
  f.data_offset_ = 8 + n;
  const uint64_t data_size = bytes.size() - f.data_offset_;

  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), static_cast<size_t>(n));
  AKV_ASSIGN_OR_RETURN(json header, parse_header(text));
  if (!header.is_object()) {
    return make_error(ErrorCode::kParse, "header must be a JSON object, got ", type_of(header));
  }

  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      AKV_RETURN_IF_ERROR(parse_metadata(it.value(), &f.metadata_));
      continue;
    }
    SafetensorsTensor t;
    AKV_RETURN_IF_ERROR(parse_tensor(it.key(), it.value(), data_size, &t));
    f.tensors_.push_back(std::move(t));
  }

  // The tensors must tile the data section: sorted by offset, each begins
  // where the previous one ended. Zero-size tensors sit anywhere on the tiling.
  std::stable_sort(f.tensors_.begin(), f.tensors_.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  const SafetensorsTensor* prev = nullptr;
  for (const SafetensorsTensor& t : f.tensors_) {
    if (t.begin < at) {
      return make_error(ErrorCode::kParse, "tensors ", quoted_name(prev->name), " [", prev->begin, ", ", prev->end,
                        ") and ", quoted_name(t.name), " [", t.begin, ", ", t.end, ") overlap");
    }
    if (t.begin > at) {
      return make_error(ErrorCode::kParse, "data bytes [", at, ", ", t.begin, ") before tensor ", quoted_name(t.name),
                        " belong to no tensor");
    }
    at = t.end;
    if (t.end > t.begin) prev = &t;
  }
  if (at != data_size) {
    return make_error(ErrorCode::kParse, "data bytes [", at, ", ", data_size,
                      ") at the end of the file belong to no tensor");
  }
  for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
  return f;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto mapped = MappedFile::open(path);
  if (!mapped.is_ok()) return mapped.status();
  auto file = std::make_shared<MappedFile>(std::move(mapped).value());
  auto parsed = parse(file->bytes());
  if (!parsed.is_ok()) return parsed.status().with_context(path);
  SafetensorsFile f = std::move(parsed).value();
  f.file_ = std::move(file);
  f.path_ = path;
  return f;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> SafetensorsFile::tensor_data(const SafetensorsTensor& t) const {
  return bytes_.subspan(static_cast<size_t>(data_offset_ + t.begin), static_cast<size_t>(t.end - t.begin));
}

Result<std::vector<float>> SafetensorsFile::tensor_f32(std::string_view name) const {
  const SafetensorsTensor* t = find(name);
  if (!t) return make_error(ErrorCode::kNotFound, "no tensor ", quoted_name(name));
  const std::span<const uint8_t> src = tensor_data(*t);
  std::vector<float> out;
  switch (t->dtype) {
    case SafetensorsDtype::kF32:
      out.resize(static_cast<size_t>(t->n_elements));
      if (!out.empty()) std::memcpy(out.data(), src.data(), src.size());
      return out;
    case SafetensorsDtype::kF16:
    case SafetensorsDtype::kBF16: {
      out.resize(static_cast<size_t>(t->n_elements));
      const bool half = t->dtype == SafetensorsDtype::kF16;
      for (size_t i = 0; i < out.size(); ++i) {
        const uint16_t h = load_u16(src.data() + 2 * i);
        out[i] = half ? fp16_to_f32(h) : bf16_to_f32(h);
      }
      return out;
    }
    default:
      return make_error(ErrorCode::kUnsupported, "unsupported dtype ", safetensors_dtype_name(t->dtype), " in tensor ",
                        quoted_name(t->name), " (F32, F16 and BF16 can be read)");
  }
}

}  // namespace agentkv
