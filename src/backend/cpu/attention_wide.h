// The two inner products of paged attention (attention.cpp) on 512-bit
// vectors, for CPUs with AVX-512F: q·K over a tile of 32 keys and P·V, and
// between them the tile's softmax. Each output element runs the same chain
// of fused multiply-adds as the AVX2 kernels of attention.cpp (one chain per
// score over the head dimension, one per output element over the keys, in
// increasing order), and the softmax the same steps as softmax_tile, so the
// bits are the same; a vector holds sixteen of those chains instead of
// eight. They run where the instruction set chosen at run time (`--isa`, see
// matmul_q8.h) is avx512.
#pragma once

#include <cstdint>

namespace agentkv::cpu {

inline constexpr int kWideTileKeys = 32;  // attention.cpp's kKeys

// True where these kernels are compiled in (GCC) and the chosen ISA is avx512.
bool attention_wide();

// kt[d][t] = k[t][d] for the first keys t < n in whole groups of 16, d < D
// (D % 16 == 0): kt rows 32 apart, keys in f32, f16 or bf16 (widened
// exactly). Returns how many keys it laid out (n rounded down to 16; 0 where
// D % 16 != 0); attention.cpp's gather_keys_transposed does the rest.
int wide_keys_transposed(const float* const* k, int n, int D, float* kt);
int wide_keys_transposed_f16(const uint16_t* const* k, int n, int D, float* kt);
int wide_keys_transposed_bf16(const uint16_t* const* k, int n, int D, float* kt);

// s[qi][t] = qs[qi] · kt[:, t] for t < 32: qs rows D apart, kt (D, 32), s rows 32 apart.
void wide_tile_scores(const float* qs, const float* kt, float* s, int nq, int D);

// attention.cpp's softmax_tile on 512-bit vectors: the tile's scores p[0..32)
// masked from `valid` on, m_new = max(m_old, their max), p[t] = exp(p[t] -
// m_new), sum = their sum. The same bits as softmax_tile: the max and the
// sum in its order (four 8-lane vectors, then its horizontal steps), and
// exp8's steps lane for lane, sixteen lanes at a time.
void wide_softmax_tile(float* p, int valid, float m_old, float* m_new, float* sum);

// acc[q][0..D) += sum_{t < n} p[q][t] * v[t][0..D) for q < nq: acc rows D
// apart, p rows 32 apart; D % 32 == 0. V rows in f32, f16 or bf16.
void wide_pv_heads(float* acc, const float* p, const float* const* v, int n, int D, int nq);
void wide_pv_heads_f16(float* acc, const float* p, const uint16_t* const* v, int n, int D, int nq);
void wide_pv_heads_bf16(float* acc, const float* p, const uint16_t* const* v, int n, int D, int nq);

}  // namespace agentkv::cpu
