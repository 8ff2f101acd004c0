// Dequantization against gguf-py's own dequantizer on random blocks of every
// supported type (fixture: tools/reference/make_dequant_ref.py).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "format/ggml_type.h"
#include "format_test_util.h"

namespace agentkv {
namespace {

using test::floats_from_hex;
using test::from_hex;

nlohmann::json load_ref() {
  return nlohmann::json::parse(test::read_text(test::source_dir() + "/tests/data/format/dequant_ref.json"));
}

TEST(Dequant, MatchesGgufPyBitExactly) {
  const nlohmann::json ref = load_ref();
  ASSERT_GE(ref["cases"].size(), 11u);
  for (const auto& c : ref["cases"]) {
    const std::string name = c["type"];
    SCOPED_TRACE(name);
    const auto type = static_cast<GgmlType>(c["type_id"].get<uint32_t>());
    const std::vector<uint8_t> data = from_hex(c["data_hex"]);
    const std::vector<float> expected = floats_from_hex(c["expected_f32_hex"]);
    const int64_t n = c["n"];
    ASSERT_EQ(static_cast<int64_t>(expected.size()), n);
    auto row = ggml_row_bytes(type, n);
    ASSERT_TRUE(row.is_ok()) << row.status().message();
    ASSERT_EQ(*row, data.size());
    EXPECT_EQ(ggml_type_name(c["type_id"].get<uint32_t>()), name);

    std::vector<float> got(n, -12345.0f);
    Status st = dequantize_row(type, data.data(), got.data(), n);
    ASSERT_TRUE(st.is_ok()) << st.message();
    int mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (test::float_bits(got[i]) != test::float_bits(expected[i]) && mismatches++ < 5) {
        ADD_FAILURE() << name << " element " << i << ": got " << got[i] << " expected " << expected[i];
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST(Dequant, RowsCanStartAtAnyBlock) {
  // Dequantizing block by block from an odd, unaligned address equals one call.
  const nlohmann::json ref = load_ref();
  for (const auto& c : ref["cases"]) {
    const auto type = static_cast<GgmlType>(c["type_id"].get<uint32_t>());
    const auto traits = ggml_type_traits(c["type_id"].get<uint32_t>());
    ASSERT_TRUE(traits.has_value());
    const std::vector<uint8_t> data = from_hex(c["data_hex"]);
    const std::vector<float> expected = floats_from_hex(c["expected_f32_hex"]);
    std::vector<uint8_t> shifted(data.size() + 1);
    std::memcpy(shifted.data() + 1, data.data(), data.size());
    std::vector<float> got(expected.size());
    const int64_t be = traits->block_elems, bb = traits->block_bytes;
    for (int64_t b = 0; b * be < static_cast<int64_t>(expected.size()); ++b) {
      ASSERT_TRUE(dequantize_row(type, shifted.data() + 1 + b * bb, got.data() + b * be, be).is_ok());
    }
    EXPECT_EQ(0, std::memcmp(got.data(), expected.data(), got.size() * 4)) << c["type"];
  }
}

TEST(Dequant, RejectsUnsupportedTypesAndPartialBlocks) {
  std::vector<uint8_t> src(1024);
  std::vector<float> dst(1024);
  Status st = dequantize_row(GgmlType::kQ2_K, src.data(), dst.data(), 256);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("q2_K"), std::string::npos) << st.message();
  st = dequantize_row(GgmlType::kQ8_1, src.data(), dst.data(), 32);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  st = dequantize_row(static_cast<GgmlType>(77), src.data(), dst.data(), 32);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("77"), std::string::npos);
  st = dequantize_row(GgmlType::kQ4_0, src.data(), dst.data(), 33);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("33"), std::string::npos) << st.message();
  st = dequantize_row(GgmlType::kQ4_K, src.data(), dst.data(), -256);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(dequantize_row(GgmlType::kQ4_K, src.data(), dst.data(), 0).is_ok());
}

}  // namespace
}  // namespace agentkv
