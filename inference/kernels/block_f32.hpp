// Blocked low-bit weights times f32 activations, for x86 AVX2 (-mavx2 -mfma -mf16c): the exact sibling of
// q4_1_q8_1.hpp. The activations stay f32 (no int8 rounding), so a difference of 1e-9 in an input row stays ~1e-9 in
// the output, as in OpenVINO's own f32 products. Shared by the standalone microbenchmark (q4_bench.cpp) and the
// OpenVINO extension ops (q4_matmul.cpp); an experiment, the engine does not use it.
//
// Two weight formats, both in blocks of 32 along K (K a multiple of 32, G = K / 32 blocks a row), the scales in f16
// as the model stores them:
//   Q4_1 (the default model's 210 layer products; Q41HalfWeights): codes u8 [N, K / 2], 16 bytes a block in two
//     halves of 8: byte i of half h holds q[16h + i] in its low nibble and q[16h + 8 + i] in its high one (not ggml's
//     order: one widening then a mask or a shift gives 8 codes in order, ~10% faster than ggml's layout here),
//     scales d and zero points z f16 [N, G]:
//     w[j] = d (q[j] - z) = d q[j] + m with m = -(z d). The exact 4-bit IR (inference/models/q4_1.py) holds d and z
//     as f16; z d, two 11-bit significands, is exact in f32. 20 bytes a block: GGUF Q4_1's own size.
//   Q8_0 (the default model's LM head; Q80Weights): codes s8 [N, K] (the IR's u8 code minus its zero point, exact),
//     scales d f16 [N, G]: w[j] = d s[j].
//
// The block-sum form (as llama.cpp's ggml_vec_dot_q4_1_q8_1, with x in f32 instead of int8): for row t, output n,
//   y = sum_b d_b S_b + sum_b m_b X_b,   S_b = sum_{j in block b} q_j x_j,   X_b = sum_{j in block b} x_j
// so the weights are never formed: the codes are converted to f32 (exact) and multiplied by x, d and m applied once
// per block. In this fixed order for every (t, n):
//   S_b   8 f32 lanes: lane l = ((q_l x_l + q_{l+8} x_{l+8}) + q_{l+16} x_{l+16}) + q_{l+24} x_{l+24} (a product,
//         then fused multiply-adds)
//   A     8 lanes, A_l = fma(d_b, S_b,l, A_l) for b = 0, 1, ... G - 1
//   X_b   once per row (block_sums): lanes ((x_l + x_{l+8}) + x_{l+16}) + x_{l+24}, then hsum8
//   M     8 lanes over the blocks in chunks of 8, chunk by chunk: M_i = M_i - (z_b d_b) X_b for b = 8c + i (one fused
//         multiply-add; blocks past G count 0)
//   y     hsum8(A) + hsum8(M); hsum8 adds lanes as ((0+4)+(2+6))+((1+5)+(3+7)).
// Every term d_b q_j x_j and m_b x_j goes through at most G + 10 roundings, so (Higham, "Accuracy and Stability of
// Numerical Algorithms", 2nd ed., 3.1) |y - sum_j w_j x_j| <= gamma_{G+10} sum_b sum_j (|d_b q_j x_j| + |m_b x_j|),
// gamma_n = n u / (1 - n u), u = 2^-24 (tests/test_q4_kernel.py checks it).
// Q8_0 has no offsets and its weights w = d s are exact in f32, so it forms them (one product) and sums w x as before
// the block-sum form: 8 lanes, lane l a chain of fused multiply-adds over k = l, l + 8, ... in increasing k, then
// hsum8 (measured ~10% faster than the block-sum form for the LM head); each term goes through K / 8 + 3 roundings. No step mixes rows, and a row's result
// never depends on how many rows or outputs are computed with it, nor on which thread computes it: a many-token pass
// computes each row bit for bit as a one-token pass does.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "q4_1_q8_1.hpp"

namespace specchat {

constexpr int64_t F32_OUTPUT_GROUP = 4;  // outputs a thread's range is a multiple of
constexpr int64_t PREFETCH_COLUMNS = 16;  // how many output rows ahead the weights are prefetched

struct Q41HalfWeights {
    const uint8_t* codes;    // [N, K / 2]
    const uint16_t* scales;  // d, f16 [N, K / 32]
    const uint16_t* zeros;   // z, f16 [N, K / 32]
    int64_t n, k;
};

struct Q80Weights {
    const int8_t* codes;     // [N, K]
    const uint16_t* scales;  // d, f16 [N, K / 32]
    int64_t n, k;
};

// The row stride of block_sums' output for rows of k: the blocks rounded up to a whole chunk of 8.
inline int64_t padded_blocks(int64_t k) { return (k / Q_BLOCK + 7) / 8 * 8; }

// X[r, b] for rows r < rows of x [rows, k] (the file comment's order) into sums [rows, padded_blocks(k)], 0 past
// the row's blocks.
inline void block_sums(const float* x, int64_t rows, int64_t k, float* sums) {
    const int64_t blocks = k / Q_BLOCK, stride = padded_blocks(k);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < stride; ++b) {
            const float* p = x + r * k + b * Q_BLOCK;
            sums[r * stride + b] = b < blocks ? hsum8(_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(
                _mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)), _mm256_loadu_ps(p + 16)), _mm256_loadu_ps(p + 24))) : 0.0f;
        }
}

// The `count` (1..8) f16 values at p as f32 lanes, the lanes past them 0. `readable`: 8 values can be read at p (the
// ones past `count` are the next row's); otherwise they are copied one by one (the matrix's last row).
inline __m256 halves(const uint16_t* p, int64_t count, bool readable) {
    alignas(16) static constexpr uint16_t ones_then_zeros[16] = {0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF};
    if (count == 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    __m128i h;
    if (readable) {
        h = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)),
                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(ones_then_zeros + 8 - count)));
    } else {
        alignas(16) uint16_t part[8] = {};
        for (int64_t i = 0; i < count; ++i) part[i] = p[i];
        h = _mm_load_si128(reinterpret_cast<const __m128i*>(part));
    }
    return _mm256_cvtph_ps(h);
}

// Where block b of output row `col` starts in memory (for the prefetch).
inline const void* block_address(const Q41HalfWeights& w, int64_t col, int64_t b) {
    return w.codes + col * (w.k / 2) + b * Q_BLOCK_BYTES;
}
inline const void* block_address(const Q80Weights& w, int64_t col, int64_t b) { return w.codes + col * w.k + b * Q_BLOCK; }

// The codes of block b of output row `col` as f32: codes [8i .. 8i + 7] in v[i].
inline void codes_of(const Q41HalfWeights& w, int64_t col, int64_t b, __m256 v[4]) {
    const uint8_t* codes = static_cast<const uint8_t*>(block_address(w, col, b));
    const __m256i nibble = _mm256_set1_epi32(0x0F);
    for (int g = 0; g < 2; ++g) {  // 8 bytes widened to 8 lanes hold codes 16g .. 16g + 7 and, shifted, 16g + 8 ..
        const __m256i both = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + 8 * g)));
        v[2 * g] = _mm256_cvtepi32_ps(_mm256_and_si256(both, nibble));
        v[2 * g + 1] = _mm256_cvtepi32_ps(_mm256_srli_epi32(both, 4));
    }
}
inline void codes_of(const Q80Weights& w, int64_t col, int64_t b, __m256 v[4]) {
    const int8_t* codes = w.codes + col * w.k + b * Q_BLOCK;
    for (int i = 0; i < 4; ++i)
        v[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + 8 * i))));
}

// y[r0 + r, n + c] for r < R, c < C (see the file comment for the arithmetic and its order); x is [rows, K], sums
// its block_sums (Q4_1 only; unused for Q8_0). Weights are prefetched ahead up to output row `end` (exclusive: the
// rows past it are another thread's).
template <int R, int C, class Weights>
inline void f32_tile(const Weights& w, const float* x, const float* sums, float* y, int64_t y_stride, int64_t r0,
                     int64_t n, int64_t end) {
    constexpr bool has_offsets = std::is_same_v<Weights, Q41HalfWeights>;
    const int64_t blocks = w.k / Q_BLOCK, stride = padded_blocks(w.k);
    __m256 acc[R][C], offsets[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = offsets[r][c] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < blocks; b0 += 8) {
        const int64_t count = std::min<int64_t>(8, blocks - b0);
        alignas(32) float d[C][8];
        for (int c = 0; c < C; ++c) {
            const bool readable = n + c + 1 < w.n;
            const __m256 dc = halves(w.scales + (n + c) * blocks + b0, count, readable);
            _mm256_store_ps(d[c], dc);
            if constexpr (has_offsets) {
                const __m256 zd = _mm256_mul_ps(halves(w.zeros + (n + c) * blocks + b0, count, readable), dc);  // exact
                for (int r = 0; r < R; ++r)
                    offsets[r][c] = _mm256_fnmadd_ps(zd, _mm256_loadu_ps(sums + (r0 + r) * stride + b0), offsets[r][c]);
            }
        }
        for (int64_t b = b0; b < b0 + count; ++b) {
            for (int c = 0; c < C; ++c) {
                // a core's hardware prefetch alone read the Q8_0 LM head at ~6 GB/s, 12 GB/s with this (8 rows ahead:
                // 10, 32: 12); the same block PREFETCH_COLUMNS output rows on, kept inside this thread's range
                if (n + c + PREFETCH_COLUMNS < end)
                    _mm_prefetch(static_cast<const char*>(block_address(w, n + c + PREFETCH_COLUMNS, b)), _MM_HINT_T0);
                __m256 v[4];
                codes_of(w, n + c, b, v);
                const __m256 scale = _mm256_broadcast_ss(&d[c][b - b0]);
                if constexpr (has_offsets) {
                    for (int r = 0; r < R; ++r) {
                        const float* xr = x + (r0 + r) * w.k + b * Q_BLOCK;
                        __m256 s = _mm256_mul_ps(v[0], _mm256_loadu_ps(xr));
                        for (int i = 1; i < 4; ++i) s = _mm256_fmadd_ps(v[i], _mm256_loadu_ps(xr + 8 * i), s);
                        acc[r][c] = _mm256_fmadd_ps(scale, s, acc[r][c]);
                    }
                } else {
                    for (int i = 0; i < 4; ++i) v[i] = _mm256_mul_ps(scale, v[i]);  // w = d s, exact
                    for (int r = 0; r < R; ++r) {
                        const float* xr = x + (r0 + r) * w.k + b * Q_BLOCK;
                        for (int i = 0; i < 4; ++i) acc[r][c] = _mm256_fmadd_ps(v[i], _mm256_loadu_ps(xr + 8 * i), acc[r][c]);
                    }
                }
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c)
            y[(r0 + r) * y_stride + n + c] = has_offsets ? hsum8(acc[r][c]) + hsum8(offsets[r][c]) : hsum8(acc[r][c]);
}

// y[r, n] for every row r < rows and outputs n in [n0, n1) (multiples of F32_OUTPUT_GROUP); x is [rows, K] f32 and
// sums its block_sums (Q4_1; Q8_0 may pass nullptr), y is [rows, y_stride]. Rows go in tiles of up to 4, or 5 when 5
// are left (each tile reads and unpacks its weights once: 5 rows as 4 + 1 unpacked them twice, and a 5-token pass,
// prompt lookup's verification at K = 4, cost 3.0-3.3 one-token products against 2.6 as one tile: bench/q4_kernel/
// q4_bench.cpp, 2 threads, Xeon with AMX), outputs in groups of 4.
template <class Weights>
void f32_product(const Weights& w, const float* x, const float* sums, int64_t rows, float* y, int64_t y_stride,
                 int64_t n0, int64_t n1) {
    for (int64_t r0 = 0; r0 < rows;) {
        const int64_t left = rows - r0;
        for (int64_t n = n0; n < n1; n += F32_OUTPUT_GROUP) {
            if (left == 5) f32_tile<5, 2>(w, x, sums, y, y_stride, r0, n, n1), f32_tile<5, 2>(w, x, sums, y, y_stride, r0, n + 2, n1);
            else if (left >= 4) f32_tile<4, 2>(w, x, sums, y, y_stride, r0, n, n1), f32_tile<4, 2>(w, x, sums, y, y_stride, r0, n + 2, n1);
            else if (left == 3) f32_tile<3, 2>(w, x, sums, y, y_stride, r0, n, n1), f32_tile<3, 2>(w, x, sums, y, y_stride, r0, n + 2, n1);
            else if (left == 2) f32_tile<2, 4>(w, x, sums, y, y_stride, r0, n, n1);
            else f32_tile<1, 4>(w, x, sums, y, y_stride, r0, n, n1);
        }
        r0 += left == 5 ? 5 : std::min<int64_t>(left, 4);
    }
}

}  // namespace specchat
