// ggml type traits against gguf-py's GGML_QUANT_SIZES (fixture from
// tools/reference/make_dequant_ref.py).
#include "format/ggml_type.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "format_test_util.h"

namespace agentkv {
namespace {

TEST(GgmlType, BlockSizesMatchGgufPy) {
  const auto ref =
      nlohmann::json::parse(test::read_text(test::source_dir() + "/tests/data/format/dequant_ref.json"));
  ASSERT_GE(ref["quant_sizes"].size(), 30u);
  for (const auto& s : ref["quant_sizes"]) {
    const uint32_t id = s["type_id"];
    const std::string name = s["name"];
    SCOPED_TRACE(name);
    auto t = ggml_type_traits(id);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->block_elems, s["block_elems"].get<int64_t>());
    // gguf-py still lists q8_1 as 40 bytes (two f32 scales); ggml's
    // block_q8_1 has been two f16s + 32 int8 = 36 bytes for years, and no
    // GGUF file stores q8_1 (it is a matmul-internal format).
    if (id == static_cast<uint32_t>(GgmlType::kQ8_1)) {
      EXPECT_EQ(t->block_bytes, 36);
    } else {
      EXPECT_EQ(t->block_bytes, s["block_bytes"].get<int64_t>());
    }
    std::string lower = name;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(ch));
    std::string ours(t->name);
    for (char& ch : ours) ch = static_cast<char>(std::tolower(ch));
    EXPECT_EQ(ours, lower);
  }
}

TEST(GgmlType, UnknownIdsAndNames) {
  EXPECT_FALSE(ggml_type_traits(4).has_value());  // removed q4_2
  EXPECT_FALSE(ggml_type_traits(1000).has_value());
  EXPECT_EQ(ggml_type_name(1000), "type 1000");
  EXPECT_EQ(ggml_type_name(3), "q4_1");
  EXPECT_EQ(ggml_type_name(14), "q6_K");
}

TEST(GgmlType, RowBytes) {
  EXPECT_EQ(*ggml_row_bytes(GgmlType::kF32, 10), 40u);
  EXPECT_EQ(*ggml_row_bytes(GgmlType::kQ4_1, 576), 18u * 20u);
  EXPECT_EQ(*ggml_row_bytes(GgmlType::kQ6_K, 512), 420u);
  auto bad = ggml_row_bytes(GgmlType::kQ4_K, 300);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("block size 256"), std::string::npos) << bad.status().message();
  auto overflow = ggml_row_bytes(GgmlType::kF64, int64_t{1} << 62);
  ASSERT_FALSE(overflow.is_ok());
  EXPECT_EQ(overflow.status().code(), ErrorCode::kOutOfRange);
  EXPECT_FALSE(ggml_row_bytes(static_cast<GgmlType>(5), 32).is_ok());
}

}  // namespace
}  // namespace agentkv
