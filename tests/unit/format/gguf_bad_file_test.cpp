// Malformed GGUF files (the list of llama.cpp's tests/test-gguf.cpp and
// more): each must fail with one clean line naming the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <random>

#include "format/gguf.h"
#include "format_test_util.h"

namespace agentkv {
namespace {

template <typename T>
void patch(std::vector<uint8_t>& b, size_t at, T v) {
  ASSERT_LE(at + sizeof v, b.size());
  std::memcpy(b.data() + at, &v, sizeof v);
}

template <typename T>
void append(std::vector<uint8_t>& b, T v) {
  const size_t at = b.size();
  b.resize(at + sizeof v);
  std::memcpy(b.data() + at, &v, sizeof v);
}

void append_string(std::vector<uint8_t>& b, const std::string& s) {
  append<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

std::vector<uint8_t> header(uint64_t n_tensors, uint64_t n_kv) {
  std::vector<uint8_t> b = {'G', 'G', 'U', 'F'};
  append<uint32_t>(b, 3);
  append<uint64_t>(b, n_tensors);
  append<uint64_t>(b, n_kv);
  return b;
}

// Parses and checks: error, the expected substring, one line.
void expect_error(const std::vector<uint8_t>& bytes, const std::string& substring) {
  auto r = GgufFile::parse(bytes);
  ASSERT_FALSE(r.is_ok()) << "parsed although expected: " << substring;
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find(substring), std::string::npos) << "message: " << msg << "\nexpected: " << substring;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// Offsets inside a file from one_tensor_file(): header 24, name "t" (8 + 1).
constexpr size_t kNdimsAt = 24 + 9;
constexpr size_t kNe0At = kNdimsAt + 4;

std::vector<uint8_t> one_tensor_file() {
  GgufWriter w;
  w.add_tensor_f32("t", {4}, {1, 2, 3, 4});
  return w.to_bytes();
}

TEST(GgufBadFile, Magic) {
  std::vector<uint8_t> b = test::small_writer().to_bytes();
  b[0] = 'X';
  expect_error(b, "bad magic 0x46554758");
  expect_error({}, "unexpected end of file at offset 0 reading magic");
  expect_error({'G', 'G', 'U'}, "unexpected end of file");
}

TEST(GgufBadFile, Versions) {
  for (uint32_t v : {0u, 1u, 99u}) {
    std::vector<uint8_t> b = test::small_writer().to_bytes();
    patch<uint32_t>(b, 4, v);
    expect_error(b, "unsupported GGUF version " + std::to_string(v));
    EXPECT_EQ(GgufFile::parse(b).status().code(), ErrorCode::kUnsupported);
  }
}

TEST(GgufBadFile, HugeCountsFailFast) {
  for (uint64_t n : {uint64_t{1} << 63, ~uint64_t{0}, uint64_t{1} << 40}) {
    std::vector<uint8_t> b = test::small_writer().to_bytes();
    patch<uint64_t>(b, 8, n);
    expect_error(b, "tensor count " + std::to_string(n) + " exceeds");
    b = test::small_writer().to_bytes();
    patch<uint64_t>(b, 16, n);
    expect_error(b, "metadata key count " + std::to_string(n) + " exceeds");
  }
}

TEST(GgufBadFile, StringLengthPastEnd) {
  // Key length.
  std::vector<uint8_t> b = header(0, 1);
  append<uint64_t>(b, 1000);
  b.resize(b.size() + 20, 'k');
  expect_error(b, "metadata key: string length 1000 at offset 24 exceeds the 20 bytes left");
  // Value length: the first key is "general.architecture" (8 + 20 bytes),
  // then its u32 type, then the string length at 24 + 28 + 4 = 56.
  b = test::small_writer().to_bytes();
  patch<uint64_t>(b, 56, uint64_t{1} << 62);
  expect_error(b,
               "key 'general.architecture': metadata string: string length 4611686018427387904 at offset 56");
  // Tensor name.
  b = one_tensor_file();
  patch<uint64_t>(b, 24, ~uint64_t{0});
  expect_error(b, "tensor name: string length 18446744073709551615");
}

TEST(GgufBadFile, ArraysAndValues) {
  std::vector<uint8_t> b = header(0, 1);
  append_string(b, "a");
  append<uint32_t>(b, 9);  // array
  append<uint32_t>(b, 4);  // of u32
  append<uint64_t>(b, uint64_t{1} << 61);
  b.resize(b.size() + 16);
  expect_error(b, "key 'a': array of 2305843009213693952 u32 at offset");

  b = header(0, 1);
  append_string(b, "a");
  append<uint32_t>(b, 13);
  append<uint32_t>(b, 0);
  expect_error(b, "key 'a': unknown metadata value type 13");

  b = header(0, 1);
  append_string(b, "a");
  append<uint32_t>(b, 9);
  append<uint32_t>(b, 99);
  append<uint64_t>(b, 0);
  expect_error(b, "unknown metadata value type 99");

  b = header(0, 1);
  append_string(b, "a");
  append<uint32_t>(b, 7);
  append<uint8_t>(b, 2);
  expect_error(b, "key 'a': invalid bool value 2");

  // Arrays nested 9 deep.
  b = header(0, 1);
  append_string(b, "deep");
  append<uint32_t>(b, 9);
  for (int i = 0; i < 9; ++i) {
    append<uint32_t>(b, 9);
    append<uint64_t>(b, 1);
  }
  append<uint32_t>(b, 0);
  append<uint64_t>(b, 0);
  expect_error(b, "key 'deep': arrays nested deeper than 8 levels");
}

TEST(GgufBadFile, TotalArrayElementsAreCapped) {
  // Each element becomes a ~100-byte GgufValue, so 16 MiB of u8 would cost
  // 1.6 GB: the reader refuses more than 2^24 elements before allocating.
  std::vector<uint8_t> b = header(0, 1);
  append_string(b, "big");
  append<uint32_t>(b, 9);
  append<uint32_t>(b, 0);  // u8
  append<uint64_t>(b, (uint64_t{1} << 24) + 1);
  b.resize(b.size() + (size_t{1} << 24) + 1);
  expect_error(b, "key 'big': metadata arrays hold more than 16777216 elements in total");
  EXPECT_EQ(GgufFile::parse(b).status().code(), ErrorCode::kResourceExhausted);
}

TEST(GgufBadFile, OpenPrefixesThePath) {
  const std::string path = ::testing::TempDir() + "/agentkv_bad_" + std::to_string(getpid()) + ".gguf";
  GgufWriter w = test::small_writer();
  w.set_version(1);
  ASSERT_TRUE(w.write(path).is_ok());
  auto r = GgufFile::open(path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), path + ": unsupported GGUF version 1");
  std::remove(path.c_str());
}

TEST(GgufBadFile, DuplicateKeyAndTensor) {
  GgufWriter w = test::small_writer();
  w.add_uint32("llama.block_count", 3);
  expect_error(w.to_bytes(), "duplicate key 'llama.block_count'");
  w = test::small_writer();
  w.add_tensor_f32("b", {1}, {1});
  expect_error(w.to_bytes(), "duplicate tensor name 'b'");
}

TEST(GgufBadFile, Alignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufWriter w = test::small_writer();
    w.add_uint32("general.alignment", a);
    expect_error(w.to_bytes(), "general.alignment must be a nonzero power of two, got " + std::to_string(a));
  }
  GgufWriter w = test::small_writer();
  w.add_string("general.alignment", "32");
  expect_error(w.to_bytes(), "general.alignment must be an integer, got string");
  w = test::small_writer();
  w.add_int32("general.alignment", -32);
  expect_error(w.to_bytes(), "got -32");
}

TEST(GgufBadFile, TensorShapes) {
  GgufWriter w;
  w.add_tensor_f32("five", {1, 1, 1, 1, 1}, {1});
  expect_error(w.to_bytes(), "tensor 'five': n_dims 5 exceeds the maximum of 4");

  w = GgufWriter();
  w.add_tensor_f32("zero", {4, 0}, {});
  expect_error(w.to_bytes(), "tensor 'zero': dimension 1 is 0 (must be positive)");

  w = GgufWriter();
  w.add_tensor_f32("neg", {-4}, {});
  expect_error(w.to_bytes(), "tensor 'neg': dimension 0 is -4");

  w = GgufWriter();
  w.add_tensor_f32("big", {int64_t{1} << 32, int64_t{1} << 32}, {});
  expect_error(w.to_bytes(),
               "tensor 'big': element count of shape [4294967296, 4294967296] overflows 64 bits");

  w = GgufWriter();
  w.add_tensor_f32("big3", {int64_t{1} << 62, 2, 2}, {});
  expect_error(w.to_bytes(), "overflows 64 bits");

  // Fits int64 elements but not bytes.
  w = GgufWriter();
  w.add_tensor("bytes", GgmlType::kF32, {int64_t{1} << 62}, {});
  expect_error(w.to_bytes(), "tensor 'bytes': row of 4611686018427387904 f32 elements overflows 64-bit size");

  w = GgufWriter();
  w.add_tensor("partial", GgmlType::kQ4_0, {33}, std::vector<uint8_t>(36));
  expect_error(w.to_bytes(),
               "tensor 'partial': row of 33 elements is not a multiple of the q4_0 block size 32");

  std::vector<uint8_t> b = one_tensor_file();
  patch<uint32_t>(b, kNdimsAt, 0xffffffffu);
  expect_error(b, "n_dims 4294967295 exceeds");
  b = one_tensor_file();
  patch<int64_t>(b, kNe0At, INT64_MIN);
  expect_error(b, "dimension 0 is -9223372036854775808");
}

TEST(GgufBadFile, NamesInMessagesAreEscapedAndCut) {
  // Found by fuzz_gguf: a name with a newline made a two-line message.
  GgufWriter w;
  w.add_tensor("a\nb", GgmlType::kF32, {1}, {});
  expect_error(w.to_bytes(), "tensor 'a\\x0ab': data [offset 0, 4 bytes] extends past end of file");
  w = GgufWriter();
  w.add_uint32(std::string(1000, 'k'), 1);
  w.add_uint32(std::string(1000, 'k'), 1);
  auto r = GgufFile::parse(w.to_bytes());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "duplicate key '" + std::string(128, 'k') + "...'");
}

TEST(GgufBadFile, UnknownType) {
  GgufWriter w;
  w.add_tensor("t", static_cast<GgmlType>(77), {32}, std::vector<uint8_t>(64));
  expect_error(w.to_bytes(), "tensor 't': unknown type id 77");
  w = GgufWriter();
  w.add_tensor("t", static_cast<GgmlType>(4), {32}, std::vector<uint8_t>(64));  // removed q4_2
  expect_error(w.to_bytes(), "unknown type id 4");
}

TEST(GgufBadFile, DataPastEnd) {
  GgufWriter w;
  w.add_tensor_f32("ok", {4}, {1, 2, 3, 4});
  w.add_tensor_f32("blk.0.attn_q.weight", {1024}, {1, 2, 3, 4});  // 4 KiB claimed, 16 bytes stored
  std::vector<uint8_t> b = w.to_bytes();
  expect_error(b,
               "tensor 'blk.0.attn_q.weight': data [offset 32, 4096 bytes] extends past end of file (size " +
                   std::to_string(b.size()) + ")");
  EXPECT_EQ(GgufFile::parse(b).status().code(), ErrorCode::kOutOfRange);

  // An offset whose sum with the data start wraps around 2^64.
  b = one_tensor_file();
  const size_t offset_at = kNe0At + 8 + 4;
  patch<uint64_t>(b, offset_at, ~uint64_t{0} - 31);
  expect_error(b, "data [offset 18446744073709551584, 16 bytes] extends past end of file");
  // Misaligned offset.
  b = one_tensor_file();
  patch<uint64_t>(b, offset_at, 8);
  expect_error(b, "tensor 't': offset 8 is not a multiple of the alignment 32");
}

TEST(GgufBadFile, EveryTruncationOfASmallFile) {
  GgufWriter w = test::small_writer();
  w.add_tensor("q", GgmlType::kQ8_0, {64}, std::vector<uint8_t>(68, 1));
  const std::vector<uint8_t> full = w.to_bytes();
  auto parsed = GgufFile::parse(full);
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  uint64_t data_end = 0;
  for (const GgufTensorInfo& t : parsed->tensors()) {
    data_end = std::max<uint64_t>(data_end, (parsed->tensor_data(t).data() - full.data()) + t.n_bytes);
  }
  ASSERT_LT(data_end, full.size());  // the writer pads after the last tensor
  for (size_t len = 0; len < full.size(); ++len) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(len));
    auto r = GgufFile::parse(cut);
    if (len < data_end) {
      ASSERT_FALSE(r.is_ok()) << "truncated at " << len;
      EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
    } else {
      EXPECT_TRUE(r.is_ok()) << "only padding cut at " << len << ": " << r.status().message();
    }
  }
}

TEST(GgufBadFile, RandomByteFlipsNeverCrash) {
  // Not a substitute for the fuzzer (fuzz/fuzz_gguf.cpp); a cheap smoke test
  // that also runs under ASan in the unit suite.
  const std::vector<uint8_t> full = test::small_writer().to_bytes();
  std::mt19937_64 rng(7);
  int failures = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> b = full;
    for (int k = 0; k < 3; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    auto r = GgufFile::parse(b);
    if (!r.is_ok()) {
      ++failures;
      EXPECT_FALSE(r.status().message().empty());
    } else {
      for (const GgufTensorInfo& t : r->tensors()) ASSERT_EQ(r->tensor_data(t).size(), t.n_bytes);
    }
  }
  EXPECT_GT(failures, 0);
}

}  // namespace
}  // namespace agentkv
