// Products with weights kept in their GGUF block format (backend.h
// QuantMatrix), for every row count. Blocks are expanded to f32 (in
// registers for a few rows, into an L2 panel for many) and multiplied by f32
// activations in the canonical order of dot_tile.h, so the result is the f32
// product with the dequantized matrix and the same for a row whatever the
// other rows (x is never quantized: the engine's logits must stay within 1e-4
// of a float64 reference).
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace agentkv::cpu {

// Elements per block of a type matmul_quant handles, or 0 for any other type.
int64_t quant_block_elems(uint32_t type);

// y[i, j] (+)= dot(x[i], dequant(w[j])) for rows i < m of x (row stride w.k)
// and output columns j in [n0, n1) (y row stride ldy). w.k must be a multiple
// of the type's block size and the type supported (quant_block_elems > 0).
// Reads each weight row once for all m rows.
void quant_gemv_rows(const float* x, const QuantMatrix& w, float* y, int64_t m, int64_t ldy, int64_t n0,
                     int64_t n1, bool accumulate);

}  // namespace agentkv::cpu
