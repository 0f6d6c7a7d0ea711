// Blocked low-bit weights times f32 activations, for x86 AVX2 (-mavx2 -mfma): the exact sibling of q4_1_q8_1.hpp.
// The activations stay f32 (no int8 rounding), so a difference of 1e-9 in an input row stays ~1e-9 in the output,
// as in OpenVINO's own f32 products; the weights are decompressed to f32 in registers. Shared by the standalone
// microbenchmark (q4_bench.cpp) and the OpenVINO extension ops (q4_matmul.cpp); an experiment, the engine does not
// use it.
//
// Two weight formats, both in blocks of 32 along K (K a multiple of 32):
//   Q4_1 (the default model's 210 layer products, GGUF Q4_1; Q41Weights in q4_1_q8_1.hpp):
//     codes u8 [N, K / 2] (ggml's block layout: byte j of a block holds q[j] in its low nibble, q[j + 16] in its
//     high), scales d and offsets m f32 [N, K / 32]:  w[j] = fma(d, q[j], m), rounded once in f32.
//   Q8_0 (the default model's LM head, GGUF Q8_0; in the IR u8 codes with zero point z, f16 scale):
//     codes s8 [N, K] (s = q - z, exact), scales d f32 [N, K / 32]:  w[j] = d * s[j], exact in f32 (d an f16: 11
//     significant bits, s 8).
//
// y[t, n] = sum_k w[n, k] x[t, k], in this fixed order for every (t, n): 8 f32 lanes, lane l accumulating
// acc_l = fma(w[k], x[t, k], acc_l) over k = l, l + 8, l + 16, ... in increasing k (one fma each, one accumulator
// a lane), then y = hsum8(acc) (((0+4)+(2+6))+((1+5)+(3+7))). The weights are decompressed once per tile and shared by
// its rows; no step mixes rows, and a row's result never depends on how many rows or outputs are computed with it,
// nor on which thread computes it: a many-token pass computes each row bit for bit as a one-token pass does.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "q4_1_q8_1.hpp"

namespace specchat {

constexpr int64_t F32_OUTPUT_GROUP = 4;  // outputs a thread's range is a multiple of
constexpr int64_t PREFETCH_COLUMNS = 16;  // how many output rows ahead the weights are prefetched

struct Q80Weights {
    const int8_t* codes;   // [N, K]
    const float* scales;   // [N, K / 32]
    int64_t n, k;
};

// Where block b of output row `col` starts in memory (for the prefetch).
inline const void* block_address(const Q41Weights& w, int64_t col, int64_t b) {
    return w.codes + col * (w.k / 2) + b * Q_BLOCK_BYTES;
}
inline const void* block_address(const Q80Weights& w, int64_t col, int64_t b) { return w.codes + col * w.k + b * Q_BLOCK; }

// The four 8-weight vectors of Q4_1 block b of output row `col`, decompressed: w[8i .. 8i + 7] in v[i].
inline void q4_1_block(const Q41Weights& w, int64_t col, int64_t b, __m256 v[4]) {
    const int64_t blocks = w.k / Q_BLOCK;
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.codes + col * (w.k / 2) + b * Q_BLOCK_BYTES));
    const __m128i nibble = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(packed, nibble);                     // q[0..15]
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(packed, 4), nibble);  // q[16..31]
    const __m256 d = _mm256_broadcast_ss(w.scales + col * blocks + b);
    const __m256 m = _mm256_broadcast_ss(w.offsets + col * blocks + b);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int i = 0; i < 4; ++i) v[i] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i])), m);
}

// The same for a Q8_0 block.
inline void q8_0_block(const Q80Weights& w, int64_t col, int64_t b, __m256 v[4]) {
    const int8_t* codes = w.codes + col * w.k + b * Q_BLOCK;
    const __m256 d = _mm256_broadcast_ss(w.scales + col * (w.k / Q_BLOCK) + b);
    for (int i = 0; i < 4; ++i) {
        const __m128i eight = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + 8 * i));
        v[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eight)));
    }
}

inline void block_of(const Q41Weights& w, int64_t col, int64_t b, __m256 v[4]) { q4_1_block(w, col, b, v); }
inline void block_of(const Q80Weights& w, int64_t col, int64_t b, __m256 v[4]) { q8_0_block(w, col, b, v); }

// y[r0 + r, n + c] for r < R, c < C (see the file comment for the arithmetic and its order); x is [rows, K].
template <int R, int C, class Weights>
inline void f32_tile(const Weights& w, const float* x, float* y, int64_t y_stride, int64_t r0, int64_t n) {
    const int64_t blocks = w.k / Q_BLOCK;
    __m256 acc[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
        for (int c = 0; c < C; ++c) {
            // a core's hardware prefetch alone read the Q8_0 LM head at ~6 GB/s, 12 GB/s with this (8 rows ahead: 10, 32:
            // 12); the same block PREFETCH_COLUMNS output rows on, kept inside the matrix
            if (n + c + PREFETCH_COLUMNS < w.n)
                _mm_prefetch(static_cast<const char*>(block_address(w, n + c + PREFETCH_COLUMNS, b)), _MM_HINT_T0);
            __m256 v[4];
            block_of(w, n + c, b, v);
            for (int r = 0; r < R; ++r) {
                const float* xr = x + (r0 + r) * w.k + b * Q_BLOCK;
                for (int i = 0; i < 4; ++i) acc[r][c] = _mm256_fmadd_ps(v[i], _mm256_loadu_ps(xr + 8 * i), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) y[(r0 + r) * y_stride + n + c] = hsum8(acc[r][c]);
}

// y[r, n] for every row r < rows and outputs n in [n0, n1) (multiples of F32_OUTPUT_GROUP); x is [rows, K] f32,
// y is [rows, y_stride]. Rows go in tiles of up to 4 (each tile reads its weights once), outputs in groups of 4.
template <class Weights>
void f32_product(const Weights& w, const float* x, int64_t rows, float* y, int64_t y_stride, int64_t n0, int64_t n1) {
    for (int64_t r0 = 0; r0 < rows;) {
        const int64_t left = rows - r0;
        for (int64_t n = n0; n < n1; n += F32_OUTPUT_GROUP) {
            if (left >= 4) f32_tile<4, 2>(w, x, y, y_stride, r0, n), f32_tile<4, 2>(w, x, y, y_stride, r0, n + 2);
            else if (left == 3) f32_tile<3, 2>(w, x, y, y_stride, r0, n), f32_tile<3, 2>(w, x, y, y_stride, r0, n + 2);
            else if (left == 2) f32_tile<2, 4>(w, x, y, y_stride, r0, n);
            else f32_tile<1, 4>(w, x, y, y_stride, r0, n);
        }
        r0 += std::min<int64_t>(left, 4);
    }
}

}  // namespace specchat
