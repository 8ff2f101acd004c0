#include "format/safetensors_writer.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace agentkv {

void SafetensorsWriter::add(std::string name, SafetensorsDtype dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> data) {
  tensors_.push_back({std::move(name), dtype, std::move(shape), std::move(data)});
}

void SafetensorsWriter::add_f32(std::string name, std::vector<int64_t> shape, const std::vector<float>& values) {
  std::vector<uint8_t> b(values.size() * 4);
  if (!b.empty()) std::memcpy(b.data(), values.data(), b.size());
  add(std::move(name), SafetensorsDtype::kF32, std::move(shape), std::move(b));
}

void SafetensorsWriter::add_bf16(std::string name, std::vector<int64_t> shape, const std::vector<float>& values) {
  std::vector<uint8_t> b(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t h = f32_to_bf16(values[i]);
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
  add(std::move(name), SafetensorsDtype::kBF16, std::move(shape), std::move(b));
}

std::vector<uint8_t> SafetensorsWriter::raw_file(const std::string& header_json, const std::vector<uint8_t>& data) {
  const uint64_t n = header_json.size();
  std::vector<uint8_t> out(8 + header_json.size() + data.size());
  std::memcpy(out.data(), &n, 8);
  if (n) std::memcpy(out.data() + 8, header_json.data(), header_json.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + n, data.data(), data.size());
  return out;
}

std::vector<uint8_t> SafetensorsWriter::to_bytes() const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t at = 0;
  std::vector<uint8_t> data;
  for (const Tensor& t : tensors_) {
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {at, at + t.data.size()}}};
    at += t.data.size();
    data.insert(data.end(), t.data.begin(), t.data.end());
  }
  std::string text = header.dump();
  // The reference writer pads the header with spaces to a multiple of 8 so
  // the data section is 8-byte aligned in the file.
  text.append((8 - text.size() % 8) % 8, ' ');
  return raw_file(text, data);
}

Status SafetensorsWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return make_error(ErrorCode::kIo, "cannot create ", path);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) return make_error(ErrorCode::kIo, "write to ", path, " failed");
  return Status::ok();
}

}  // namespace agentkv
