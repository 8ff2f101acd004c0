// The safetensors reader: round trips through the writer, and hand-built bad
// files, each of which must fail with one line naming the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "format/safetensors.h"
#include "format/safetensors_writer.h"

namespace agentkv {
namespace {

std::vector<uint8_t> raw(const std::string& header, size_t data_bytes = 0) {
  return SafetensorsWriter::raw_file(header, std::vector<uint8_t>(data_bytes, 0));
}

void expect_error(const std::vector<uint8_t>& bytes, const std::string& substring) {
  auto r = SafetensorsFile::parse(bytes);
  ASSERT_FALSE(r.is_ok()) << "parsed although expected: " << substring;
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find(substring), std::string::npos) << "message: " << msg << "\nexpected: " << substring;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(Safetensors, RoundTripF32F16BF16AndMetadata) {
  SafetensorsWriter w;
  w.add_f32("a", {2, 3}, {1, 2, 3, 4, 5, -6.5f});
  w.add_bf16("b", {3}, {1.0f, -2.0f, 0.15625f});
  // F16 by hand: 1.0 = 0x3c00, -2.0 = 0xc000, 65504 = 0x7bff.
  w.add("c", SafetensorsDtype::kF16, {3}, {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b});
  w.add("empty", SafetensorsDtype::kF32, {0, 4}, {});
  w.add("ids", SafetensorsDtype::kI64, {1}, std::vector<uint8_t>(8, 0));
  w.add_metadata("format", "pt");
  const std::vector<uint8_t> bytes = w.to_bytes();
  EXPECT_EQ(*reinterpret_cast<const uint64_t*>(bytes.data()) % 8, 0u) << "header padded to 8";

  auto r = SafetensorsFile::parse(bytes);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->tensors().size(), 5u);
  EXPECT_EQ(r->metadata().at("format"), "pt");
  EXPECT_EQ(r->find("a")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*r->tensor_f32("a"), (std::vector<float>{1, 2, 3, 4, 5, -6.5f}));
  EXPECT_EQ(*r->tensor_f32("b"), (std::vector<float>{1.0f, -2.0f, 0.15625f}));
  EXPECT_EQ(*r->tensor_f32("c"), (std::vector<float>{1.0f, -2.0f, 65504.0f}));
  EXPECT_TRUE(r->tensor_f32("empty")->empty());
  auto ids = r->tensor_f32("ids");
  ASSERT_FALSE(ids.is_ok());
  EXPECT_NE(ids.status().message().find("unsupported dtype I64 in tensor 'ids'"), std::string::npos);
  EXPECT_EQ(r->tensor_f32("nope").status().code(), ErrorCode::kNotFound);
}

TEST(Safetensors, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  float x;
  uint32_t u = 0x3f808000;  // exactly half-way between 0x3f80 and 0x3f81: even is 0x3f80
  std::memcpy(&x, &u, 4);
  EXPECT_EQ(f32_to_bf16(x), 0x3f80);
  u = 0x3f818000;  // half-way between 0x3f81 and 0x3f82: even is 0x3f82
  std::memcpy(&x, &u, 4);
  EXPECT_EQ(f32_to_bf16(x), 0x3f82);
  const uint16_t nan = f32_to_bf16(NAN);
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x7f, 0);
}

TEST(Safetensors, HeaderLength) {
  expect_error({}, "file of 0 bytes is too small");
  expect_error({1, 2, 3}, "file of 3 bytes is too small");
  std::vector<uint8_t> b = raw("{}");
  b[0] = 200;  // header length 200, file 10 bytes
  expect_error(b, "header length 200 past the end of the file (size 10)");
  b = raw("{}");
  std::memset(b.data(), 0xff, 8);
  expect_error(b, "header length 18446744073709551615 past the end of the file (size 10)");
  EXPECT_EQ(SafetensorsFile::parse(b).status().code(), ErrorCode::kOutOfRange);
  // An empty file object is a valid (empty) safetensors file.
  EXPECT_TRUE(SafetensorsFile::parse(raw("{}")).is_ok());
  EXPECT_TRUE(SafetensorsFile::parse(raw("{}      ")).is_ok()) << "trailing space padding";
}

TEST(Safetensors, HeaderOverLimit) {
  std::vector<uint8_t> b(8 + kSafetensorsMaxHeaderBytes + 1, ' ');
  const uint64_t n = kSafetensorsMaxHeaderBytes + 1;
  std::memcpy(b.data(), &n, 8);
  expect_error(b, "exceeds the limit of 104857600 bytes");
}

TEST(Safetensors, BadJson) {
  expect_error(raw("{\"a\": "), "header is not valid JSON");
  expect_error(raw("not json"), "header is not valid JSON");
  expect_error(raw("{\"a\": 1}\nxx"), "header is not valid JSON");
  expect_error(raw(std::string("{\"a\x01\": 1}")), "header is not valid JSON");
  expect_error(raw("{\"\xff\xfe\": 1}"), "header is not valid JSON");  // invalid UTF-8
  expect_error(raw("[1, 2]"), "header must be a JSON object, got array");
  expect_error(raw("\"str\""), "header must be a JSON object, got string");
  std::string deep = "{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}";
  expect_error(raw(deep), "nests deeper than 16 levels");
  std::string very_deep(50000, '[');
  expect_error(raw(very_deep), "nests deeper than 16 levels");
}

TEST(Safetensors, DuplicateKeys) {
  expect_error(raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                   R"( "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                   8),
               "duplicate key 'a' in header");
  expect_error(raw(R"({"a": {"dtype": "F32", "dtype": "F16", "shape": [1], "data_offsets": [0, 4]}})", 4),
               "duplicate key 'dtype'");
  expect_error(raw(R"({"__metadata__": {"k": "1", "k": "2"}})"), "duplicate key 'k'");
}

TEST(Safetensors, FieldTypes) {
  const auto one = [](const std::string& body) { return raw("{\"t\": " + body + "}", 4); };
  expect_error(one("[]"), "tensor 't': entry must be an object, got array");
  expect_error(one(R"({"shape": [1], "data_offsets": [0, 4]})"), "tensor 't': missing field 'dtype'");
  expect_error(one(R"({"dtype": "F32", "data_offsets": [0, 4]})"), "missing field 'shape'");
  expect_error(one(R"({"dtype": "F32", "shape": [1]})"), "missing field 'data_offsets'");
  expect_error(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1})"), "unknown field 'x'");
  expect_error(one(R"({"dtype": 3, "shape": [1], "data_offsets": [0, 4]})"), "dtype must be a string, got number");
  expect_error(one(R"({"dtype": "F33", "shape": [1], "data_offsets": [0, 4]})"), "unknown dtype 'F33' in tensor 't'");
  expect_error(one(R"({"dtype": "F32", "shape": 1, "data_offsets": [0, 4]})"), "shape must be an array, got number");
  expect_error(one(R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})"), "shape dimension is negative");
  expect_error(one(R"({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]})"),
               "shape dimension must be a non-negative integer, got number");
  expect_error(one(R"({"dtype": "F32", "shape": ["1"], "data_offsets": [0, 4]})"),
               "shape dimension must be a non-negative integer, got string");
  expect_error(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0]})"),
               "data_offsets must be an array of 2 integers");
  expect_error(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, -4]})"), "data_offsets[1] is negative");
  expect_error(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, null]})"),
               "data_offsets[1] must be a non-negative integer, got null");
  expect_error(raw(R"({"__metadata__": []})"), "__metadata__ must be an object of strings, got array");
  expect_error(raw(R"({"__metadata__": {"k": 1}})"), "__metadata__ value of 'k' must be a string, got number");
}

TEST(Safetensors, ShapesAndOffsets) {
  const auto one = [](const std::string& body, size_t data) { return raw("{\"t\": " + body + "}", data); };
  expect_error(one(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 4]})", 4),
               "tensor 't': shape [2] F32 needs 8 bytes, data_offsets [0, 4] hold 4");
  expect_error(one(R"({"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]})", 4),
               "overflows 64 bits");
  expect_error(one(R"({"dtype": "F64", "shape": [4611686018427387904], "data_offsets": [0, 4]})", 4),
               "needs more than 2^64 bytes");
  expect_error(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [4, 0]})", 4), "end before they begin");
  expect_error(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [4, 8]})", 4),
               "data_offsets [4, 8] extend past the data section (4 bytes)");
  expect_error(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [18446744073709551612, 0]})", 4),
               "end before they begin");
  expect_error(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})", 6),
               "data bytes [4, 6) at the end of the file belong to no tensor");
  expect_error(raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                   R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                   8),
               "overlap");
  expect_error(raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                   R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                   12),
               "data bytes [4, 8) before tensor 'b' belong to no tensor");
  // Out-of-order offsets are fine as long as they tile the data.
  auto r = SafetensorsFile::parse(raw(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},)"
                                      R"( "b": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})",
                                      8));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->tensors()[0].name, "b");
}

TEST(Safetensors, ControlBytesInNamesStayOnOneLine) {
  expect_error(raw("{\"a\\nb\": {\"dtype\": \"X\", \"shape\": [], \"data_offsets\": [0, 0]}}"),
               "unknown dtype 'X' in tensor 'a\\x0ab'");
}

TEST(Safetensors, OpenMissingFile) {
  auto r = SafetensorsFile::open("/nonexistent/agentkv/x.safetensors");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("x.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace agentkv
