// GgufWriter -> GgufFile round trips: every metadata value type, nested
// arrays, tensors of several types with alignment padding, both versions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

#include "format/gguf.h"
#include "format_test_util.h"

namespace agentkv {
namespace {

using V = GgufValue;

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + 31 * i);
  return v;
}

GgufWriter every_type_writer() {
  GgufWriter w;
  w.add_kv("u8", V::of_uint(GgufType::kUint8, 200));
  w.add_kv("i8", V::of_int(GgufType::kInt8, -100));
  w.add_kv("u16", V::of_uint(GgufType::kUint16, 60000));
  w.add_kv("i16", V::of_int(GgufType::kInt16, -30000));
  w.add_uint32("u32", 4000000000u);
  w.add_int32("i32", -2000000000);
  w.add_float32("f32", 0.1f);
  w.add_bool("bool", true);
  w.add_string("string", std::string("h\0llo \xe2\x9c\x93", 10));
  w.add_uint64("u64", 18446744073709551615ull);
  w.add_kv("i64", V::of_int(GgufType::kInt64, INT64_MIN));
  w.add_kv("f64", V::of_float(GgufType::kFloat64, 0.1));
  w.add_string_array("arr.string", {"", "x", "yz"});
  w.add_int32_array("arr.i32", {-1, 0, 7});
  w.add_float32_array("arr.f32", {0.5f, -2.0f});
  w.add_kv("arr.u8", V::of_array(GgufType::kUint8,
                                 {V::of_uint(GgufType::kUint8, 1), V::of_uint(GgufType::kUint8, 255)}));
  w.add_kv("arr.u64", V::of_array(GgufType::kUint64, {V::of_uint(GgufType::kUint64, 1ull << 63)}));
  w.add_kv("arr.bool", V::of_array(GgufType::kBool, {V::of_bool(false), V::of_bool(true)}));
  w.add_kv("arr.f64", V::of_array(GgufType::kFloat64, {V::of_float(GgufType::kFloat64, 1e300)}));
  w.add_kv("arr.empty", V::of_array(GgufType::kInt16, {}));
  w.add_kv("arr.nested",
           V::of_array(GgufType::kArray,
                       {V::of_array(GgufType::kUint32,
                                    {V::of_uint(GgufType::kUint32, 1), V::of_uint(GgufType::kUint32, 2)}),
                        V::of_array(GgufType::kString, {V::of_string("deep")}),
                        V::of_array(GgufType::kArray,
                                    {V::of_array(GgufType::kInt8, {V::of_int(GgufType::kInt8, -3)})})}));
  return w;
}

TEST(GgufRoundTrip, EveryValueType) {
  for (uint32_t version : {2u, 3u}) {
    GgufWriter w = every_type_writer();
    w.set_version(version);
    const std::vector<uint8_t> bytes = w.to_bytes();
    auto r = GgufFile::parse(bytes);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    const GgufFile& f = *r;
    EXPECT_EQ(f.version(), version);
    EXPECT_EQ(f.alignment(), 32u);
    ASSERT_EQ(f.kvs().size(), 21u);
    EXPECT_EQ(f.kvs()[0].first, "u8");
    EXPECT_EQ(f.kvs()[20].first, "arr.nested");

    EXPECT_EQ(f.find("u8")->type, GgufType::kUint8);
    EXPECT_EQ(*f.get_uint("u8"), 200u);
    EXPECT_EQ(*f.get_int("i8"), -100);
    EXPECT_EQ(*f.get_uint("u16"), 60000u);
    EXPECT_EQ(*f.get_int("i16"), -30000);
    EXPECT_EQ(*f.get_uint("u32"), 4000000000u);
    EXPECT_EQ(*f.get_int("u32"), 4000000000);
    EXPECT_EQ(*f.get_int("i32"), -2000000000);
    EXPECT_EQ(*f.get_float("f32"), static_cast<double>(0.1f));
    EXPECT_EQ(*f.get_bool("bool"), true);
    EXPECT_EQ(*f.get_string("string"), std::string("h\0llo \xe2\x9c\x93", 10));
    EXPECT_EQ(*f.get_uint("u64"), 18446744073709551615ull);
    EXPECT_EQ(*f.get_int("i64"), INT64_MIN);
    EXPECT_EQ(*f.get_float("f64"), 0.1);
    EXPECT_EQ(*f.get_string_array("arr.string"), (std::vector<std::string>{"", "x", "yz"}));
    EXPECT_EQ(*f.get_int_array("arr.i32"), (std::vector<int64_t>{-1, 0, 7}));
    EXPECT_EQ(*f.get_int_array("arr.u8"), (std::vector<int64_t>{1, 255}));
    EXPECT_EQ(*f.get_float_array("arr.f32"), (std::vector<double>{0.5, -2.0}));
    EXPECT_EQ(*f.get_float_array("arr.f64"), (std::vector<double>{1e300}));
    EXPECT_TRUE(f.get_int_array("arr.empty")->empty());
    const GgufValue* b = f.find("arr.bool");
    ASSERT_EQ(b->arr.size(), 2u);
    EXPECT_EQ(b->arr[1].u, 1u);
    EXPECT_EQ(b->arr[1].type, GgufType::kBool);

    const GgufValue* n = f.find("arr.nested");
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->elem_type, GgufType::kArray);
    ASSERT_EQ(n->arr.size(), 3u);
    EXPECT_EQ(n->arr[0].elem_type, GgufType::kUint32);
    EXPECT_EQ(n->arr[0].arr[1].u, 2u);
    EXPECT_EQ(n->arr[1].arr[0].s, "deep");
    EXPECT_EQ(n->arr[2].arr[0].arr[0].i, -3);
  }
}

TEST(GgufRoundTrip, TypedGettersRejectWrongTypes) {
  const std::vector<uint8_t> bytes = every_type_writer().to_bytes();
  auto r = GgufFile::parse(bytes);
  ASSERT_TRUE(r.is_ok());
  const GgufFile& f = *r;
  EXPECT_EQ(f.get_uint("missing").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(f.get_uint("missing").status().message(), "key 'missing' not found");
  EXPECT_EQ(f.find("missing"), nullptr);
  auto neg = f.get_uint("i8");
  EXPECT_EQ(neg.status().code(), ErrorCode::kOutOfRange);
  EXPECT_FALSE(f.get_int("u64").is_ok());  // 2^64-1 does not fit int64
  auto s = f.get_uint("string");
  EXPECT_EQ(s.status().message(), "key 'string' has type string, expected an unsigned integer");
  EXPECT_FALSE(f.get_float("u32").is_ok());
  EXPECT_FALSE(f.get_bool("u8").is_ok());
  EXPECT_FALSE(f.get_string("u8").is_ok());
  EXPECT_FALSE(f.get_string_array("arr.i32").is_ok());
  EXPECT_FALSE(f.get_int_array("arr.f32").is_ok());
  EXPECT_FALSE(f.get_int_array("arr.u64").is_ok());  // 2^63 does not fit int64
  auto fa = f.get_float_array("arr.string");
  EXPECT_EQ(fa.status().message(), "key 'arr.string' has type array of string, expected array of float");
}

struct TensorSpec {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;
  size_t bytes;
};

TEST(GgufRoundTrip, TensorsWithAlignmentPadding) {
  const std::vector<TensorSpec> specs = {
      {"f32.odd", GgmlType::kF32, {3}, 12},
      {"q4_0", GgmlType::kQ4_0, {64, 3}, 2 * 3 * 18},
      {"f16", GgmlType::kF16, {5, 1, 1, 2}, 20},
      {"q6_k", GgmlType::kQ6_K, {256}, 210},
      {"q8_0", GgmlType::kQ8_0, {32, 2, 2}, 4 * 34},
      {"iq2_xxs.unsupported", static_cast<GgmlType>(16), {256}, 66},
  };
  for (uint64_t alignment : {32u, 1u, 64u, 4096u}) {
    SCOPED_TRACE(alignment);
    GgufWriter w;
    w.set_alignment(alignment);
    w.add_string("general.name", "t");
    for (size_t i = 0; i < specs.size(); ++i) {
      w.add_tensor(specs[i].name, specs[i].type, specs[i].ne,
                   pattern(specs[i].bytes, static_cast<uint8_t>(i)));
    }
    const std::vector<uint8_t> bytes = w.to_bytes();
    auto r = GgufFile::parse(bytes);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    const GgufFile& f = *r;
    EXPECT_EQ(f.alignment(), alignment);
    ASSERT_EQ(f.tensors().size(), specs.size());
    uint64_t prev_end = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      const GgufTensorInfo& t = f.tensors()[i];
      EXPECT_EQ(t.name, specs[i].name);
      EXPECT_EQ(t.type, specs[i].type);
      EXPECT_EQ(t.ne, specs[i].ne);
      EXPECT_EQ(t.n_bytes, specs[i].bytes);
      uint64_t n = 1;
      for (int64_t d : specs[i].ne) n *= static_cast<uint64_t>(d);
      EXPECT_EQ(t.n_elements, n);
      EXPECT_EQ(t.offset % alignment, 0u);
      EXPECT_GE(t.offset, prev_end);
      prev_end = t.offset + t.n_bytes;
      std::span<const uint8_t> data = f.tensor_data(t);
      EXPECT_EQ((data.data() - bytes.data()) % static_cast<ptrdiff_t>(alignment), 0);
      EXPECT_EQ(std::vector<uint8_t>(data.begin(), data.end()),
                pattern(specs[i].bytes, static_cast<uint8_t>(i)));
      EXPECT_EQ(f.find_tensor(specs[i].name), &t);
    }
    EXPECT_EQ(f.find_tensor("nope"), nullptr);
  }
}

TEST(GgufRoundTrip, WriteAndOpenFile) {
  const std::string path = ::testing::TempDir() + "/agentkv_rt_" + std::to_string(getpid()) + ".gguf";
  GgufWriter w = test::small_writer();
  ASSERT_TRUE(w.write(path).is_ok());
  auto r = GgufFile::open(path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->path(), path);
  EXPECT_EQ(*r->get_string("general.architecture"), "llama");
  EXPECT_EQ(*r->get_string_array("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "b", "<s>"}));
  const GgufTensorInfo* b = r->find_tensor("b");
  ASSERT_NE(b, nullptr);
  std::vector<float> vals(6);
  std::memcpy(vals.data(), r->tensor_data(*b).data(), 24);
  EXPECT_EQ(vals, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  // The mapping outlives copies of the handle.
  GgufFile copy = *r;
  r = Status(ErrorCode::kInternal, "drop");
  EXPECT_EQ(std::memcmp(copy.tensor_data(*copy.find_tensor("b")).data(), vals.data(), 24), 0);
  std::remove(path.c_str());

  auto missing = GgufFile::open(path);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

}  // namespace
}  // namespace agentkv
