#include "format/ggml_type.h"

#include <array>
#include <string>

namespace agentkv {
namespace {

struct TypeRow {
  uint32_t id;
  GgmlTypeTraits traits;
};

// Block layouts of every ggml type id a GGUF file may name (ggml-common.h).
// Ids 4, 5, 31-33 and 36-38 were removed from ggml and are unknown here.
constexpr std::array kTypes = {
    TypeRow{0, {"f32", 1, 4, true}},          TypeRow{1, {"f16", 1, 2, true}},
    TypeRow{2, {"q4_0", 32, 18, true}},       TypeRow{3, {"q4_1", 32, 20, true}},
    TypeRow{6, {"q5_0", 32, 22, true}},       TypeRow{7, {"q5_1", 32, 24, true}},
    TypeRow{8, {"q8_0", 32, 34, true}},       TypeRow{9, {"q8_1", 32, 36, false}},
    TypeRow{10, {"q2_K", 256, 84, false}},    TypeRow{11, {"q3_K", 256, 110, false}},
    TypeRow{12, {"q4_K", 256, 144, true}},    TypeRow{13, {"q5_K", 256, 176, true}},
    TypeRow{14, {"q6_K", 256, 210, true}},    TypeRow{15, {"q8_K", 256, 292, false}},
    TypeRow{16, {"iq2_xxs", 256, 66, false}}, TypeRow{17, {"iq2_xs", 256, 74, false}},
    TypeRow{18, {"iq3_xxs", 256, 98, false}}, TypeRow{19, {"iq1_s", 256, 50, false}},
    TypeRow{20, {"iq4_nl", 32, 18, false}},   TypeRow{21, {"iq3_s", 256, 110, false}},
    TypeRow{22, {"iq2_s", 256, 82, false}},   TypeRow{23, {"iq4_xs", 256, 136, false}},
    TypeRow{24, {"i8", 1, 1, false}},         TypeRow{25, {"i16", 1, 2, false}},
    TypeRow{26, {"i32", 1, 4, false}},        TypeRow{27, {"i64", 1, 8, false}},
    TypeRow{28, {"f64", 1, 8, false}},        TypeRow{29, {"iq1_m", 256, 56, false}},
    TypeRow{30, {"bf16", 1, 2, true}},        TypeRow{34, {"tq1_0", 256, 54, false}},
    TypeRow{35, {"tq2_0", 256, 66, false}},   TypeRow{39, {"mxfp4", 32, 17, false}},
    TypeRow{40, {"nvfp4", 64, 36, false}},    TypeRow{41, {"q1_0", 128, 18, false}},
};

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id) {
  for (const TypeRow& r : kTypes) {
    if (r.id == type_id) return r.traits;
  }
  return std::nullopt;
}

std::string ggml_type_name(uint32_t type_id) {
  if (auto t = ggml_type_traits(type_id)) return std::string(t->name);
  return "type " + std::to_string(type_id);
}

Result<uint64_t> ggml_row_bytes(GgmlType type, int64_t n) {
  const uint32_t id = static_cast<uint32_t>(type);
  auto t = ggml_type_traits(id);
  if (!t) return make_error(ErrorCode::kUnsupported, "unknown tensor type id ", id);
  if (n < 0) return make_error(ErrorCode::kInvalidArgument, "negative element count ", n);
  if (n % t->block_elems != 0) {
    return make_error(ErrorCode::kInvalidArgument, "row of ", n, " elements is not a multiple of the ",
                      t->name, " block size ", t->block_elems);
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(n / t->block_elems), static_cast<uint64_t>(t->block_bytes),
                             &bytes)) {
    return make_error(ErrorCode::kOutOfRange, "row of ", n, " ", t->name, " elements overflows 64-bit size");
  }
  return bytes;
}

}  // namespace agentkv
