// Helpers shared by the format tests: fixture paths, hex decoding, and a
// small valid GGUF built with the writer.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "format/gguf.h"

#include "source_dir.h"

namespace agentkv::test {

inline std::string model_path() { return source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }

inline bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

inline std::vector<float> floats_from_hex(const std::string& hex) {
  std::vector<uint8_t> b = from_hex(hex);
  std::vector<float> out(b.size() / 4);
  std::memcpy(out.data(), b.data(), out.size() * 4);
  return out;
}

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A small valid file: a few keys of different types and three f32 tensors
// whose data needs alignment padding.
inline GgufWriter small_writer() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_uint32("llama.block_count", 2);
  w.add_float32("llama.rope.freq_base", 10000.0f);
  w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "<s>"});
  w.add_int32_array("tokenizer.ggml.token_type", {1, 1, 3});
  w.add_tensor_f32("a", {3}, {1.0f, 2.0f, 3.0f});
  w.add_tensor_f32("b", {2, 3}, {1, 2, 3, 4, 5, 6});
  w.add_tensor_f32("c", {5}, {-1, -2, -3, -4, -5});
  return w;
}

}  // namespace agentkv::test
