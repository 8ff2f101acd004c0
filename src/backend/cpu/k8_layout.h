// The "k8" layout of q4_K, q6_K, q5_0 and q8_0 matrices: records of eight
// rows (output rows) per 256-weight super-block (q5_0, q8_0: per 32-weight
// block), in
// which one 32-bit lane holds four consecutive weights of one column, so
// that the q8 decode kernel (matmul_q8_k8.inc) feeds eight columns per
// instruction from a broadcast of four activation bytes and gets a block's
// eight column sums in one vector,
// with no horizontal reduction. The integers are the file's, so the products
// have the file layout's bits; k8_to_file gives the file's blocks back,
// byte for byte, for the paths that read blocks (prefill's panels, the f32
// and scalar kernels).
//
// Records, one per (group g of columns 8g..8g+7, super-block s), g-major;
// the last group repeats its last column:
//  q4_K, 1184 bytes (the file's 1152 for eight columns, plus the scales
//  unpacked to bytes):
//    [0, 16) d of the eight columns (f16); [16, 32) dmin;
//    [32, 96) sc[sub][col] (u8, 6 bits); [96, 160) mn[sub][col];
//    [160, 1184) qs[pair p][quad q][col][4]: qs_col[32 p + 4 q + i], whose
//    low nibbles are sub-block 2p's elements 4q + i, high ones 2p + 1's.
//  q6_K, 1680 bytes (the file's):
//    [0, 16) d (f16); [16, 144) sc[half][col] (i8, half 2j + 1 the second
//    16 elements of sub-block j);
//    [144, 1680) 16 chunks of 96 bytes, (h, quad q) in order, each
//    ql[g2][col][4] (ql_col[64 h + 32 g2 + 4 q + i]) then qh[col][4]
//    (qh_col[32 h + 4 q + i]): the kernel reads a record front to back,
//    which the hardware prefetcher follows (three streams through the record
//    streamed at a third of the rate: docs/benchmarks.md, "Decode of the K
//    types from records of eight rows").
//  q5_0, 176 bytes per 32-weight block (the file's):
//    [0, 16) d (f16); [16, 144) qs[v][col][4]: qs_col[4 v + i], whose low
//    nibbles are elements 4v + i (quad v), high ones 16 + 4v + i (quad v + 4);
//    [144, 176) hb[col][4]: bit q of byte i is element 4q + i's fifth bit,
//    so quad q's fifth bits are one shift and mask of the vector.
//  q8_0, 272 bytes per 32-weight block (the file's):
//    [0, 16) d (f16); [16, 272) qs[v][col][4]: qs_col[4 v + i] (quad v), the
//    file's signed bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace agentkv::cpu {

// ggml type ids (format/ggml_type.h): the backend does not link the format module.
inline constexpr uint32_t kK8Q5_0 = 6, kK8Q8_0 = 8, kK8Q4_K = 12, kK8Q6_K = 14;

// Bytes of one record, or 0 for a type without the layout.
constexpr int64_t k8_record_bytes(uint32_t type) {
  return type == kK8Q4_K ? 1184 : type == kK8Q6_K ? 1680 : type == kK8Q5_0 ? 176 : type == kK8Q8_0 ? 272 : 0;
}
// Weights of one column in a record: the file block's (256, or q5_0's and
// q8_0's 32).
constexpr int64_t k8_unit(uint32_t type) { return type == kK8Q5_0 || type == kK8Q8_0 ? 32 : 256; }
// Bytes of the file's block (k8_unit weights) of a k8 type.
constexpr int64_t k8_block_bytes(uint32_t type) {
  return type == kK8Q4_K ? 144 : type == kK8Q6_K ? 210 : type == kK8Q5_0 ? 22 : type == kK8Q8_0 ? 34 : 0;
}
// Bytes of the records of an (n, k) matrix.
inline int64_t k8_bytes(uint32_t type, int64_t n, int64_t k) {
  return (n + 7) / 8 * (k / k8_unit(type)) * k8_record_bytes(type);
}

// The records of w (file layout, k a multiple of k8_unit) into out (k8_bytes).
void k8_build(const QuantMatrix& w, uint8_t* out);
// Rows [r0, r1) of the matrix of k columns whose records are rec, as the
// file's blocks: (r1 - r0) rows of k / k8_unit blocks each, packed (no row padding).
void k8_to_file(uint32_t type, const uint8_t* rec, int64_t k, int64_t r0, int64_t r1, uint8_t* out);

// A file-layout copy of rows [r0, r1) of w (w.k8), held in buf: what the
// paths that read blocks take.
QuantMatrix k8_file_rows(const QuantMatrix& w, int64_t r0, int64_t r1, std::vector<uint8_t>& buf);

}  // namespace agentkv::cpu
