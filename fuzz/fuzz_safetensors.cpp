// libFuzzer target for the safetensors reader. Any input must either parse or
// give a one-line error; a file that parses must have every tensor's bytes
// inside the input, tiling the data section, and tensor_f32 must either
// convert or refuse cleanly.
//
// Seed corpus: AGENTKV_FUZZ_WRITE_SEEDS=<dir> fuzz_safetensors -runs=0 writes
// a few small valid files made with SafetensorsWriter into <dir> and exits
// (scripts/fuzz.sh does this).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "format/safetensors.h"
#include "format/safetensors_writer.h"

using namespace agentkv;

namespace {

using fuzz::check;

void write_seeds(const std::string& dir) {
  std::vector<std::pair<std::string, SafetensorsWriter>> seeds;
  {
    SafetensorsWriter w;  // a PEFT-like adapter: lora_A (r, d_in), lora_B (d_out, r)
    w.add_f32("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", {2, 4},
              {1, 2, 3, 4, 5, 6, 7, 8});
    w.add_f32("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", {4, 2},
              {0.5f, -1, 0, 2, 3, 4, 1e-3f, 9});
    w.add_metadata("format", "pt");
    seeds.emplace_back("peft_f32.safetensors", std::move(w));
  }
  {
    SafetensorsWriter w;
    w.add_bf16("bf16", {3}, {1, -2, 0.25f});
    w.add("f16", SafetensorsDtype::kF16, {2}, {0x00, 0x3c, 0x00, 0xc0});
    w.add("i64", SafetensorsDtype::kI64, {1}, std::vector<uint8_t>(8, 7));
    w.add("empty", SafetensorsDtype::kF32, {0, 3}, {});
    w.add("scalar", SafetensorsDtype::kF32, {}, {0, 0, 0x80, 0x3f});
    seeds.emplace_back("dtypes.safetensors", std::move(w));
  }
  for (const auto& [name, w] : seeds) {
    Status st = w.write(dir + "/" + name);
    if (!st.is_ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      std::exit(1);
    }
  }
  std::fprintf(stderr, "fuzz_safetensors: wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return fuzz::write_seeds_if_asked(write_seeds); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = SafetensorsFile::parse(std::span<const uint8_t>(data, size));
  if (!r.is_ok()) {
    const std::string& msg = r.status().message();
    check(!msg.empty() && msg.find('\n') == std::string::npos, "error is one non-empty line");
    return 0;
  }
  const SafetensorsFile& f = *r;
  uint64_t covered = 0;
  unsigned sum = 0;
  for (const SafetensorsTensor& t : f.tensors()) {
    std::span<const uint8_t> span = f.tensor_data(t);
    check(span.size() == t.end - t.begin, "span size is end - begin");
    check(span.size() == t.n_elements * safetensors_dtype_size(t.dtype), "size is numel x element size");
    check(span.data() >= data && span.data() + span.size() <= data + size, "tensor data inside the input");
    check(f.find(t.name) == &t, "find returns the parsed tensor");
    for (uint8_t b : span) sum += b;  // ASan flags any byte outside the input
    covered += span.size();
    auto v = f.tensor_f32(t.name);
    if (v.is_ok()) {
      check(v->size() == t.n_elements, "tensor_f32 gives numel values");
    } else {
      check(v.status().message().find('\n') == std::string::npos, "tensor_f32 error is one line");
    }
  }
  (void)sum;
  check(covered == size - 8 - f.header_bytes(), "tensors tile the data section");
  return 0;
}
