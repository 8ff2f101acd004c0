// The real default model against what gguf-py's GGUFReader and dequantizer
// see in it (fixture: tools/reference/make_dequant_ref.py). Skipped when the
// model file is absent.
#include <gtest/gtest.h>

#include "../../ci_required.h"

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "format/ggml_type.h"
#include "format/gguf.h"
#include "format_test_util.h"
#include "util/mmap.h"

namespace agentkv {
namespace {

class GgufModel : public ::testing::Test {
 protected:
  void SetUp() override {
    AGENTKV_REQUIRE(!test::file_exists(test::model_path()), test::model_path() << " not found");
    ref_ = nlohmann::json::parse(test::read_text(test::source_dir() + "/tests/data/format/smollm2_ref.json"));
    auto r = GgufFile::open(test::model_path());
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    file_ = std::make_unique<GgufFile>(std::move(r).value());
  }
  nlohmann::json ref_;
  std::unique_ptr<GgufFile> file_;
};

GgufType type_from_name(const std::string& name) {
  for (uint32_t t = 0; t <= 12; ++t) {
    std::string ours = gguf_type_name(static_cast<GgufType>(t));
    // gguf-py spells them uint32 / int8 / float32 / float64.
    std::string py = ours;
    if (py[0] == 'u')
      py = "uint" + py.substr(1);
    else if (py[0] == 'i')
      py = "int" + py.substr(1);
    else if (py[0] == 'f')
      py = "float" + py.substr(1);
    if (py == name || ours == name) return static_cast<GgufType>(t);
  }
  ADD_FAILURE() << "unknown type name " << name;
  return GgufType::kUint8;
}

void expect_value(const GgufValue& v, GgufType type, const nlohmann::json& want) {
  switch (type) {
    case GgufType::kString:
      EXPECT_EQ(v.s, want.get<std::string>());
      break;
    case GgufType::kBool:
      EXPECT_EQ(v.u != 0, want.get<bool>());
      break;
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      EXPECT_EQ(v.f, want.get<double>());
      break;
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64:
      EXPECT_EQ(v.i, want.get<int64_t>());
      break;
    default:
      EXPECT_EQ(v.u, want.get<uint64_t>());
      break;
  }
}

TEST_F(GgufModel, MetadataMatchesGgufPy) {
  EXPECT_EQ(file_->version(), ref_["version"].get<uint32_t>());
  EXPECT_EQ(file_->alignment(), ref_["alignment"].get<uint64_t>());
  EXPECT_EQ(file_->data_offset(), ref_["data_offset"].get<uint64_t>());
  ASSERT_EQ(file_->kvs().size(), ref_["kvs"].size());
  for (size_t i = 0; i < file_->kvs().size(); ++i) {
    const auto& want = ref_["kvs"][i];
    const auto& [key, v] = file_->kvs()[i];
    SCOPED_TRACE(key);
    EXPECT_EQ(key, want["key"].get<std::string>());
    const GgufType type = type_from_name(want["type"]);
    ASSERT_EQ(v.type, type);
    if (type != GgufType::kArray) {
      expect_value(v, type, want["value"]);
      continue;
    }
    const GgufType elem = type_from_name(want["elem_type"]);
    EXPECT_EQ(v.elem_type, elem);
    ASSERT_EQ(v.arr.size(), want["length"].get<size_t>());
    for (size_t j = 0; j < want["prefix"].size(); ++j) expect_value(v.arr[j], elem, want["prefix"][j]);
  }
  EXPECT_EQ(*file_->get_string("general.architecture"), "llama");
  EXPECT_EQ(*file_->get_uint("llama.block_count"), 30u);
  EXPECT_EQ(file_->get_string_array("tokenizer.ggml.tokens")->size(), 49152u);
}

TEST_F(GgufModel, TensorTableMatchesGgufPy) {
  ASSERT_EQ(file_->tensors().size(), ref_["tensors"].size());
  for (size_t i = 0; i < file_->tensors().size(); ++i) {
    const GgufTensorInfo& t = file_->tensors()[i];
    const auto& want = ref_["tensors"][i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, want["name"].get<std::string>());
    EXPECT_EQ(static_cast<uint32_t>(t.type), want["type_id"].get<uint32_t>());
    EXPECT_EQ(t.ne, want["ne"].get<std::vector<int64_t>>());
    EXPECT_EQ(file_->data_offset() + t.offset, want["abs_offset"].get<uint64_t>());
    EXPECT_EQ(t.n_bytes, want["n_bytes"].get<uint64_t>());
    EXPECT_EQ(file_->tensor_data(t).size(), t.n_bytes);
  }
}

// Dequantizes a whole tensor in chunks of rows; returns the float64 sum.
// Adds the time spent in dequantize_row alone to *seconds when given.
double dequantize_tensor(const GgufFile& f, const GgufTensorInfo& t, std::vector<float>* first,
                         int* non_finite, double* seconds = nullptr) {
  const int64_t ne0 = t.ne[0];
  const int64_t rows = static_cast<int64_t>(t.n_elements) / ne0;
  const uint64_t row_bytes = t.n_bytes / static_cast<uint64_t>(rows);
  const int64_t chunk = std::max<int64_t>(1, 65536 / ne0);
  std::vector<float> buf(static_cast<size_t>(chunk * ne0));
  const uint8_t* src = f.tensor_data(t).data();
  double sum = 0;
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t n = std::min(chunk, rows - r) * ne0;
    const auto t0 = std::chrono::steady_clock::now();
    Status st = dequantize_row(t.type, src + r * row_bytes, buf.data(), n);
    if (seconds) *seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(st.is_ok()) << st.message();
    if (r == 0 && first) first->assign(buf.begin(), buf.begin() + std::min<int64_t>(n, 64));
    for (int64_t i = 0; i < n; ++i) {
      sum += buf[i];
      if (!std::isfinite(buf[i])) ++*non_finite;
    }
  }
  return sum;
}

TEST_F(GgufModel, DequantizationMatchesGgufPy) {
  ASSERT_GE(ref_["dequant_samples"].size(), 3u);  // f32, q8_0, q4_1
  for (const auto& s : ref_["dequant_samples"]) {
    const GgufTensorInfo* t = file_->find_tensor(s["name"].get<std::string>());
    ASSERT_NE(t, nullptr);
    SCOPED_TRACE(t->name);
    std::vector<float> first;
    int non_finite = 0;
    const double sum = dequantize_tensor(*file_, *t, &first, &non_finite);
    const std::vector<float> want = test::floats_from_hex(s["first_f32_hex"]);
    ASSERT_EQ(first.size(), want.size());
    EXPECT_EQ(std::memcmp(first.data(), want.data(), 4 * want.size()), 0);
    const double want_sum = s["sum"];
    EXPECT_NEAR(sum, want_sum, 1e-9 * std::max(1.0, std::abs(want_sum)));
    EXPECT_EQ(non_finite, 0);
  }
}

TEST_F(GgufModel, DequantizesEveryTensor) {
  uint64_t bytes = 0, elems = 0;
  int non_finite = 0;
  // Two passes: the first also pays the page faults of the mapping.
  for (int pass = 0; pass < 2; ++pass) {
    double seconds = 0;
    bytes = elems = 0;
    for (const GgufTensorInfo& t : file_->tensors()) {
      dequantize_tensor(*file_, t, nullptr, &non_finite, &seconds);
      bytes += t.n_bytes;
      elems += t.n_elements;
    }
    std::printf(
        "pass %d: dequantized %.1f MB (%.1f M elements) in %.3f s: %.0f MB/s of input, %.0f M elements/s\n",
        pass, bytes / 1e6, elems / 1e6, seconds, bytes / 1e6 / seconds, elems / 1e6 / seconds);
  }
  EXPECT_EQ(non_finite, 0);
}

TEST_F(GgufModel, TruncatedAtRandomOffsetsFailsCleanly) {
  auto mapped = MappedFile::open(test::model_path());
  ASSERT_TRUE(mapped.is_ok());
  std::span<const uint8_t> whole = mapped->bytes();
  uint64_t data_end = 0;
  for (const GgufTensorInfo& t : file_->tensors()) {
    data_end = std::max(data_end, file_->data_offset() + t.offset + t.n_bytes);
  }
  ASSERT_LE(data_end, whole.size());
  std::mt19937_64 rng(20261122);
  for (int i = 0; i < 50; ++i) {
    // Half in the metadata and tensor table, half in the tensor data.
    const uint64_t len = i % 2 ? rng() % file_->data_offset()
                               : file_->data_offset() + rng() % (data_end - file_->data_offset());
    auto r = GgufFile::parse(std::span<const uint8_t>(whole.data(), len));
    ASSERT_FALSE(r.is_ok()) << "truncated at " << len;
    const std::string& msg = r.status().message();
    EXPECT_EQ(msg.find('\n'), std::string::npos);
    if (len >= file_->data_offset()) {
      EXPECT_NE(msg.find("extends past end of file"), std::string::npos) << msg;
    }
  }
  EXPECT_TRUE(GgufFile::parse(std::span<const uint8_t>(whole.data(), data_end)).is_ok());
}

}  // namespace
}  // namespace agentkv
