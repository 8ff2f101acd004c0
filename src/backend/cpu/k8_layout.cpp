#include "backend/cpu/k8_layout.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace agentkv::cpu {

namespace {

// q4_K's 12 bytes of 6-bit scale and minimum pairs (quant::Q4_K::scale_min's
// reading), unpacked and packed back.
void unpack_scales(const uint8_t* sc, uint8_t scale[8], uint8_t mn[8]) {
  for (int j = 0; j < 8; ++j) {
    scale[j] = static_cast<uint8_t>(j < 4 ? sc[j] & 63 : (sc[j + 4] & 0x0f) | ((sc[j - 4] >> 6) << 4));
    mn[j] = static_cast<uint8_t>(j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4));
  }
}
void pack_scales(const uint8_t scale[8], const uint8_t mn[8], uint8_t* sc) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = static_cast<uint8_t>((scale[j] & 63) | ((scale[j + 4] >> 4) << 6));
    sc[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    sc[j + 8] = static_cast<uint8_t>((scale[j + 4] & 0x0f) | ((mn[j + 4] & 0x0f) << 4));
  }
}

// Column c of record r and its file block b, either way: to_file reads the
// record and writes the block, else the block is read and the record written.
template <bool kToFile>
void map_block(uint32_t type, std::conditional_t<kToFile, const uint8_t*, uint8_t*> r, int c,
               std::conditional_t<kToFile, uint8_t*, const uint8_t*> b) {
  auto move = [](auto* rec_p, auto* file_p, size_t n) {
    if constexpr (kToFile) {
      std::memcpy(file_p, rec_p, n);
    } else {
      std::memcpy(rec_p, file_p, n);
    }
  };
  if (type == kK8Q8_0) {
    move(r + 2 * c, b, 2);
    for (int v = 0; v < 8; ++v) move(r + 16 + 32 * v + 4 * c, b + 2 + 4 * v, 4);
  } else if (type == kK8Q5_0) {
    move(r + 2 * c, b, 2);
    for (int v = 0; v < 4; ++v) move(r + 16 + 32 * v + 4 * c, b + 6 + 4 * v, 4);
    // qh's bit 4q + i is bit q of the column's hb byte i.
    if constexpr (kToFile) {
      uint32_t qh = 0;
      for (int q = 0; q < 8; ++q)
        for (int i = 0; i < 4; ++i) qh |= uint32_t((r[144 + 4 * c + i] >> q) & 1u) << (4 * q + i);
      std::memcpy(b + 2, &qh, 4);
    } else {
      uint32_t qh;
      std::memcpy(&qh, b + 2, 4);
      for (int i = 0; i < 4; ++i) {
        uint8_t byte = 0;
        for (int q = 0; q < 8; ++q) byte = static_cast<uint8_t>(byte | ((qh >> (4 * q + i)) & 1u) << q);
        r[144 + 4 * c + i] = byte;
      }
    }
  } else if (type == kK8Q4_K) {
    move(r + 2 * c, b, 2);
    move(r + 16 + 2 * c, b + 2, 2);
    uint8_t scale[8], mn[8];
    if constexpr (kToFile) {
      for (int j = 0; j < 8; ++j) scale[j] = r[32 + 8 * j + c], mn[j] = r[96 + 8 * j + c];
      pack_scales(scale, mn, b + 4);
    } else {
      unpack_scales(b + 4, scale, mn);
      for (int j = 0; j < 8; ++j) r[32 + 8 * j + c] = scale[j], r[96 + 8 * j + c] = mn[j];
    }
    for (int p = 0; p < 4; ++p)
      for (int q = 0; q < 8; ++q) move(r + 160 + ((p * 8 + q) * 8 + c) * 4, b + 16 + 32 * p + 4 * q, 4);
  } else {
    move(r + 2 * c, b + 208, 2);
    for (int hf = 0; hf < 16; ++hf) move(r + 16 + 8 * hf + c, b + 192 + hf, 1);
    for (int h = 0; h < 2; ++h) {
      for (int q = 0; q < 8; ++q) {
        auto* chunk = r + 144 + (h * 8 + q) * 96;
        for (int g2 = 0; g2 < 2; ++g2) move(chunk + 32 * g2 + 4 * c, b + 64 * h + 32 * g2 + 4 * q, 4);
        move(chunk + 64 + 4 * c, b + 128 + 32 * h + 4 * q, 4);
      }
    }
  }
}

}  // namespace

void k8_build(const QuantMatrix& w, uint8_t* out) {
  const int64_t ns = w.k / k8_unit(w.type), groups = (w.n + 7) / 8, rec = k8_record_bytes(w.type),
                blk = k8_block_bytes(w.type);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t s = 0; s < ns; ++s)
      for (int c = 0; c < 8; ++c) {
        const uint8_t* b = w.data + std::min<int64_t>(8 * g + c, w.n - 1) * w.row_bytes + s * blk;
        map_block<false>(w.type, out + (g * ns + s) * rec, c, b);
      }
}

void k8_to_file(uint32_t type, const uint8_t* rec, int64_t k, int64_t r0, int64_t r1, uint8_t* out) {
  const int64_t ns = k / k8_unit(type), rb = k8_record_bytes(type), blk = k8_block_bytes(type);
  for (int64_t row = r0; row < r1; ++row)
    for (int64_t s = 0; s < ns; ++s)
      map_block<true>(type, rec + ((row / 8) * ns + s) * rb, static_cast<int>(row % 8),
                      out + ((row - r0) * ns + s) * blk);
}

QuantMatrix k8_file_rows(const QuantMatrix& w, int64_t r0, int64_t r1, std::vector<uint8_t>& buf) {
  const int64_t row_bytes = w.k / k8_unit(w.type) * k8_block_bytes(w.type);
  buf.resize(size_t(std::max<int64_t>(1, (r1 - r0) * row_bytes)));
  k8_to_file(w.type, w.data, w.k, r0, r1, buf.data());
  QuantMatrix f{w.type, buf.data(), row_bytes, r1 - r0, w.k};
  return f;
}

}  // namespace agentkv::cpu

namespace agentkv {

bool backend_cpu_k8_type(uint32_t type) { return cpu::k8_record_bytes(type) > 0; }
int64_t backend_cpu_k8_unit(uint32_t type) { return backend_cpu_k8_type(type) ? cpu::k8_unit(type) : 0; }

void backend_cpu_k8_file_row(const QuantMatrix& w, int64_t r, uint8_t* out) {
  cpu::k8_to_file(w.type, w.data, w.k, r, r + 1, out);
}

WeightBytes backend_cpu_k8_records(const QuantMatrix& w) {
  WeightBytes out(size_t(cpu::k8_bytes(w.type, w.n, w.k)));
  if (!out.empty()) cpu::k8_build(w, out.data());
  return out;
}

}  // namespace agentkv
