// libFuzzer target for the GGUF reader. Any input must either parse or give
// a one-line error; a file that parses must have every tensor's data inside
// the input, dequantize (first row of small tensors), and survive a round
// trip through GgufWriter.
//
// Seed corpus: AGENTKV_FUZZ_WRITE_SEEDS=<dir> fuzz_gguf -runs=0 writes a few
// small valid files made with GgufWriter into <dir> and exits (scripts/fuzz.sh
// does this).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "format/ggml_type.h"
#include "format/gguf.h"

using namespace agentkv;

namespace {

using fuzz::check;

std::vector<uint8_t> bytes_of(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed * 17 + i * 29);
  return v;
}

// Block bytes with finite f16 scales (0x3c00 = 1.0) at the given offsets.
std::vector<uint8_t> blocks(size_t n_blocks, size_t block_bytes, std::vector<size_t> scale_at, uint8_t seed) {
  std::vector<uint8_t> v = bytes_of(n_blocks * block_bytes, seed);
  for (size_t b = 0; b < n_blocks; ++b) {
    for (size_t at : scale_at) {
      v[b * block_bytes + at] = 0x00;
      v[b * block_bytes + at + 1] = 0x3c;
    }
  }
  return v;
}

void write_seeds(const std::string& dir) {
  std::vector<std::pair<std::string, GgufWriter>> seeds;
  {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    w.add_uint32("llama.block_count", 2);
    w.add_float32("llama.rope.freq_base", 10000.0f);
    w.add_bool("tokenizer.ggml.add_bos_token", true);
    w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "<s>", "\xc4\xa0the"});
    w.add_int32_array("tokenizer.ggml.token_type", {1, 1, 3, 1});
    w.add_float32_array("tokenizer.ggml.scores", {0.f, -1.f, -2.f, -3.f});
    w.add_tensor_f32("token_embd.weight", {4, 4}, std::vector<float>(16, 0.5f));
    w.add_tensor_f32("output_norm.weight", {4}, {1, 1, 1, 1});
    seeds.emplace_back("llama_f32.gguf", std::move(w));
  }
  {
    GgufWriter w;
    w.add_string("general.name", "quant");
    w.add_tensor("q4_0", GgmlType::kQ4_0, {32, 2}, blocks(2, 18, {0}, 1));
    w.add_tensor("q4_1", GgmlType::kQ4_1, {32}, blocks(1, 20, {0, 2}, 2));
    w.add_tensor("q5_0", GgmlType::kQ5_0, {32}, blocks(1, 22, {0}, 3));
    w.add_tensor("q5_1", GgmlType::kQ5_1, {32}, blocks(1, 24, {0, 2}, 4));
    w.add_tensor("q8_0", GgmlType::kQ8_0, {32}, blocks(1, 34, {0}, 5));
    w.add_tensor("f16", GgmlType::kF16, {3}, {0, 0x3c, 0, 0xbc, 1, 0});
    w.add_tensor("bf16", GgmlType::kBF16, {2}, {0x80, 0x3f, 0, 0});
    seeds.emplace_back("quant32.gguf", std::move(w));
  }
  {
    GgufWriter w;
    w.set_version(2);
    w.set_alignment(64);
    w.add_tensor("q4_k", GgmlType::kQ4_K, {256}, blocks(1, 144, {0, 2}, 6));
    w.add_tensor("q5_k", GgmlType::kQ5_K, {256}, blocks(1, 176, {0, 2}, 7));
    w.add_tensor("q6_k", GgmlType::kQ6_K, {256}, blocks(1, 210, {208}, 8));
    w.add_tensor("q2_k.unsupported", GgmlType::kQ2_K, {256}, bytes_of(84, 9));
    seeds.emplace_back("kquant_v2_align64.gguf", std::move(w));
  }
  {
    GgufWriter w;
    GgufValue inner = GgufValue::of_array(GgufType::kUint16, {GgufValue::of_uint(GgufType::kUint16, 7)});
    w.add_kv("nested",
             GgufValue::of_array(GgufType::kArray, {inner, GgufValue::of_array(GgufType::kArray, {inner})}));
    w.add_kv("i64", GgufValue::of_int(GgufType::kInt64, -5));
    w.add_kv("f64", GgufValue::of_float(GgufType::kFloat64, 2.5));
    w.add_kv("i8", GgufValue::of_int(GgufType::kInt8, -1));
    w.add_uint64("u64", 1);
    seeds.emplace_back("nested_metadata.gguf", std::move(w));
  }
  for (const auto& [name, w] : seeds) {
    Status st = w.write(dir + "/" + name);
    if (!st.is_ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      std::exit(1);
    }
  }
  std::fprintf(stderr, "fuzz_gguf: wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
}

void exercise_getters(const GgufFile& f) {
  for (const auto& [key, v] : f.kvs()) {
    (void)f.get_string(key);
    (void)f.get_uint(key);
    (void)f.get_int(key);
    (void)f.get_float(key);
    (void)f.get_bool(key);
    (void)f.get_string_array(key);
    (void)f.get_int_array(key);
    (void)f.get_float_array(key);
    check(f.find(key) == &v, "find returns the parsed value");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return fuzz::write_seeds_if_asked(write_seeds); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = GgufFile::parse(std::span<const uint8_t>(data, size));
  if (!r.is_ok()) {
    const std::string& msg = r.status().message();
    check(!msg.empty() && msg.find('\n') == std::string::npos, "error is one non-empty line");
    return 0;
  }
  const GgufFile& f = *r;
  exercise_getters(f);

  unsigned sum = 0;
  std::vector<float> row;
  for (const GgufTensorInfo& t : f.tensors()) {
    std::span<const uint8_t> span = f.tensor_data(t);
    check(span.size() == t.n_bytes, "span size is n_bytes");
    check(span.data() >= data && span.data() + span.size() <= data + size, "tensor data inside the input");
    check(f.find_tensor(t.name) == &t, "find_tensor returns the parsed tensor");
    for (uint8_t b : span) sum += b;  // ASan flags any byte outside the input
    auto traits = ggml_type_traits(static_cast<uint32_t>(t.type));
    check(traits.has_value(), "parsed tensors have known types");
    const int64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
    if (traits->can_dequantize && ne0 <= 4096) {
      row.resize(static_cast<size_t>(ne0));
      Status st = dequantize_row(t.type, span.data(), row.data(), ne0);
      check(st.is_ok(), "first row of a parsed tensor dequantizes");
    }
  }
  (void)sum;

  // What was read must write back to a file that reads the same.
  GgufWriter w;
  w.set_version(f.version());
  w.set_alignment(f.alignment());
  for (const auto& [key, v] : f.kvs()) w.add_kv(key, v);
  for (const GgufTensorInfo& t : f.tensors()) {
    std::span<const uint8_t> span = f.tensor_data(t);
    w.add_tensor(t.name, t.type, t.ne, std::vector<uint8_t>(span.begin(), span.end()));
  }
  const std::vector<uint8_t> again = w.to_bytes();
  auto r2 = GgufFile::parse(again);
  check(r2.is_ok(), "re-written file parses");
  check(r2->kvs().size() == f.kvs().size() && r2->tensors().size() == f.tensors().size(),
        "round trip keeps counts");
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    check(r2->tensors()[i].ne == f.tensors()[i].ne && r2->tensors()[i].n_bytes == f.tensors()[i].n_bytes,
          "round trip keeps shapes");
  }
  return 0;
}
