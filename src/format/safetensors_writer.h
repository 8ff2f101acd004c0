// Builds safetensors files: used by `agentkv synth-adapter` and by tests
// (including deliberately bad files, through raw_file()).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "format/fp16.h"  // f32_to_bf16
#include "format/safetensors.h"
#include "util/status.h"

namespace agentkv {

class SafetensorsWriter {
 public:
  // `data` must already be encoded in `dtype` (little-endian) and hold
  // numel(shape) * dtype size bytes; tensors are laid out in the order added.
  void add(std::string name, SafetensorsDtype dtype, std::vector<int64_t> shape, std::vector<uint8_t> data);
  void add_f32(std::string name, std::vector<int64_t> shape, const std::vector<float>& values);
  // Rounds to nearest even, like torch's float -> bfloat16.
  void add_bf16(std::string name, std::vector<int64_t> shape, const std::vector<float>& values);
  void add_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

  std::vector<uint8_t> to_bytes() const;
  Status write(const std::string& path) const;

  // A file from a header text and data bytes as given: for tests that need
  // headers the writer would never produce.
  static std::vector<uint8_t> raw_file(const std::string& header_json, const std::vector<uint8_t>& data);

 private:
  struct Tensor {
    std::string name;
    SafetensorsDtype dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  std::vector<Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace agentkv
