// A prototype, measured by q4_bench.cpp only (built with -mavx512f -mavx512bw -mavx512vl, --avx512): the f32 tiles
// of inference/kernels/block_f32.hpp with 16 lanes instead of 8, to see what a verification pass would cost on CPUs
// with AVX-512. Not used by the engine. Same weight layouts and the same fixed order per row (so each row is bit for
// bit the same whatever the number of rows), but other lanes than the AVX2 tiles, so other roundings:
//   Q4_1: the 16 bytes of a block widened to 16 lanes give codes [0..7, 16..23] (low nibbles) and [8..15, 24..31]
//         (high nibbles); x is read permuted the same way (permute_blocks, once per call and row), so
//         S = lo * x_lo + hi * x_hi (16 lanes, a product then a fused multiply-add), A = fma(d, S, A) per block, the
//         offsets M as the AVX2 tile (8 lanes over 8 blocks), y = reduce(A) + hsum8(M).
//   Q8_0: w = d s formed per 16 codes (exact), A = fma(w, x, A) over k in increasing order, y = reduce(A).
#pragma once

#include "block_f32.hpp"

namespace specchat {

// x [rows, k] into out [rows, k] with each block of 32 reordered as [0..7, 16..23, 8..15, 24..31] (the Q4_1 tile's lanes).
inline void permute_blocks(const float* x, int64_t rows, int64_t k, float* out) {
    for (int64_t i = 0; i < rows * k; i += 32) {
        std::memcpy(out + i, x + i, 8 * sizeof(float));
        std::memcpy(out + i + 8, x + i + 16, 8 * sizeof(float));
        std::memcpy(out + i + 16, x + i + 8, 8 * sizeof(float));
        std::memcpy(out + i + 24, x + i + 24, 8 * sizeof(float));
    }
}

template <int R, int C>
inline void f32_tile512(const Q41HalfWeights& w, const float* xp, const float* sums, float* y, int64_t y_stride,
                        int64_t r0, int64_t n, int64_t end) {
    const int64_t blocks = w.k / Q_BLOCK, stride = padded_blocks(w.k);
    __m512 acc[R][C];
    __m256 offsets[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps(), offsets[r][c] = _mm256_setzero_ps();
    const __m512i nibble = _mm512_set1_epi32(0x0F);
    for (int64_t b0 = 0; b0 < blocks; b0 += 8) {
        const int64_t count = std::min<int64_t>(8, blocks - b0);
        alignas(32) float d[C][8];
        for (int c = 0; c < C; ++c) {
            const bool readable = n + c + 1 < w.n;
            const __m256 dc = halves(w.scales + (n + c) * blocks + b0, count, readable);
            _mm256_store_ps(d[c], dc);
            const __m256 zd = _mm256_mul_ps(halves(w.zeros + (n + c) * blocks + b0, count, readable), dc);
            for (int r = 0; r < R; ++r)
                offsets[r][c] = _mm256_fnmadd_ps(zd, _mm256_loadu_ps(sums + (r0 + r) * stride + b0), offsets[r][c]);
        }
        for (int64_t b = b0; b < b0 + count; ++b)
            for (int c = 0; c < C; ++c) {
                if (n + c + PREFETCH_COLUMNS < end)
                    _mm_prefetch(static_cast<const char*>(block_address(w, n + c + PREFETCH_COLUMNS, b)), _MM_HINT_T0);
                const __m512i both = _mm512_cvtepu8_epi32(
                    _mm_loadu_si128(static_cast<const __m128i*>(block_address(w, n + c, b))));
                const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(both, nibble));
                const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(both, 4));
                const __m512 scale = _mm512_set1_ps(d[c][b - b0]);
                for (int r = 0; r < R; ++r) {
                    const float* xr = xp + (r0 + r) * w.k + b * Q_BLOCK;
                    const __m512 s = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xr + 16), _mm512_mul_ps(lo, _mm512_loadu_ps(xr)));
                    acc[r][c] = _mm512_fmadd_ps(scale, s, acc[r][c]);
                }
            }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c)
            y[(r0 + r) * y_stride + n + c] = _mm512_reduce_add_ps(acc[r][c]) + hsum8(offsets[r][c]);
}

template <int R, int C>
inline void f32_tile512(const Q80Weights& w, const float* x, const float*, float* y, int64_t y_stride, int64_t r0,
                        int64_t n, int64_t end) {
    const int64_t blocks = w.k / Q_BLOCK;
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b)
        for (int c = 0; c < C; ++c) {
            if (n + c + PREFETCH_COLUMNS < end)
                _mm_prefetch(static_cast<const char*>(block_address(w, n + c + PREFETCH_COLUMNS, b)), _MM_HINT_T0);
            const int8_t* codes = w.codes + (n + c) * w.k + b * Q_BLOCK;
            const __m512 scale = _mm512_set1_ps(_cvtsh_ss(w.scales[(n + c) * blocks + b]));
            __m512 v[2];
            for (int i = 0; i < 2; ++i)
                v[i] = _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 16 * i)))));
            for (int r = 0; r < R; ++r) {
                const float* xr = x + (r0 + r) * w.k + b * Q_BLOCK;
                for (int i = 0; i < 2; ++i) acc[r][c] = _mm512_fmadd_ps(v[i], _mm512_loadu_ps(xr + 16 * i), acc[r][c]);
            }
        }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) y[(r0 + r) * y_stride + n + c] = _mm512_reduce_add_ps(acc[r][c]);
}

// f32_product with the 16-lane tiles (Q4_1: x permuted by permute_blocks).
template <class Weights>
void f32_product512(const Weights& w, const float* x, const float* sums, int64_t rows, float* y, int64_t y_stride,
                    int64_t n0, int64_t n1) {
    for (int64_t r0 = 0; r0 < rows;) {
        const int64_t left = rows - r0;
        for (int64_t n = n0; n < n1; n += F32_OUTPUT_GROUP) {
            if (left == 5) f32_tile512<5, 2>(w, x, sums, y, y_stride, r0, n, n1), f32_tile512<5, 2>(w, x, sums, y, y_stride, r0, n + 2, n1);
            else if (left >= 4) f32_tile512<4, 2>(w, x, sums, y, y_stride, r0, n, n1), f32_tile512<4, 2>(w, x, sums, y, y_stride, r0, n + 2, n1);
            else if (left == 3) f32_tile512<3, 2>(w, x, sums, y, y_stride, r0, n, n1), f32_tile512<3, 2>(w, x, sums, y, y_stride, r0, n + 2, n1);
            else if (left == 2) f32_tile512<2, 4>(w, x, sums, y, y_stride, r0, n, n1);
            else f32_tile512<1, 4>(w, x, sums, y, y_stride, r0, n, n1);
        }
        r0 += left == 5 ? 5 : std::min<int64_t>(left, 4);
    }
}

}  // namespace specchat
