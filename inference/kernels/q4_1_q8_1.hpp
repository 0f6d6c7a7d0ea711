// Q4_1 weights times Q8_1 (row-wise int8) activations: the arithmetic of llama.cpp's ggml_vec_dot_q4_1_q8_1,
// written here from the formulas (not copied), for x86 AVX2 (-mavx2 -mfma) and, built with -mavx512vnni -mavx512vl,
// VNNI on 256-bit vectors. Shared by the standalone microbenchmark (q4_bench.cpp) and the OpenVINO extension op
// (q4_matmul.cpp); an experiment, the engine does not use it.
//
// Weights W [N, K], K a multiple of 64 (two blocks are read together), in blocks of 32 along K (GGUF Q4_1):
//   codes    u8  [N, K / 2]   16 bytes a block: byte j holds code q[j] (0..15) in its low nibble, q[j + 16] in its high
//   scales   f32 [N, K / 32]  d of each block (GGUF stores it as f16; every f16 is exact in f32)
//   offsets  f32 [N, K / 32]  m of each block:  w[j] = d * q[j] + m
// Activations x [T, K] f32, one row per token, quantized per block of 32 (Q8_1), each row on its own:
//   dx = max|x[j]| / 127,  q8[j] = nearbyint(x[j] * (1 / dx)) in -127..127 (0 when dx = 0),  sx = dx * sum_j q8[j]
// Then per block sum_j w[j] x[j] ~= d * dx * sum_j q[j] q8[j] + m * sx, and
//   y[t, n] = sum_b [ (d_b * dx_b) * idot_b ] + sum_b m_b * sx_b
// where idot_b is an exact integer (|idot_b| <= 32 * 15 * 127). The only approximation is the int8 rounding of x.
//
// Order of operations (fixed; it decides the float rounding):
//   acc (8 f32 lanes) += float(lane integer sum) * (d_lane * dx_lane), one block pair (64 weights) at a time in
//   increasing b, lanes 0-3 holding block b's four 8-weight partial sums and lanes 4-7 block b + 1's;
//   y = hsum(acc) + dot(m, sx), hsum adding lanes as ((0+4)+(2+6))+((1+5)+(3+7)) and dot in 8-lane chunks then the
//   tail. The integer lane sums are the same on both ISAs (vpmaddubsw+vpmaddwd or vpdpbusd add the same products
//   exactly), so AVX2 and VNNI give bitwise equal y. No step mixes rows, and a row's result never depends on how many
//   rows or outputs are computed with it, nor on which thread computes it: a many-token pass computes each row bit
//   for bit as a one-token pass does.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace specchat {

constexpr int64_t Q_BLOCK = 32;        // weights per block
constexpr int64_t Q_BLOCK_BYTES = 16;  // bytes of codes per block
constexpr int64_t Q_OUTPUT_GROUP = 4;  // outputs a tile computes (N must be a multiple)

enum class Isa { avx2, vnni256 };

// Quantized activations of T rows, K columns, laid out for the kernel: per block pair (b, b + 1) 64 bytes,
// [q8_b[0..15], q8_b+1[0..15], q8_b[16..31], q8_b+1[16..31]] (the order the weight nibbles unpack in), and per pair
// dxv = [dx_b x 4, dx_b+1 x 4]; sx per block.
struct Q8Rows {
    int8_t* q8;   // [T, K]
    float* dxv;   // [T, K / 64 * 8]
    float* sx;    // [T, K / 32]
    int64_t k;
};

// Quantize x [rows, K] (f32, K a multiple of 64) into `out` (Q8_1, see the file comment).
inline void quantize_rows(const float* x, int64_t rows, const Q8Rows& out) {
    const int64_t k = out.k, blocks = k / Q_BLOCK;
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < blocks; ++b) {
            const float* v = x + r * k + b * Q_BLOCK;
            float amax = 0.f;
            for (int j = 0; j < Q_BLOCK; ++j) amax = std::max(amax, std::fabs(v[j]));
            const float d = amax / 127.f;
            const float inv = d > 0.f ? 1.f / d : 0.f;
            int sum = 0;
            int8_t* pair = out.q8 + r * k + (b / 2) * 64;
            for (int j = 0; j < Q_BLOCK; ++j) {
                const int q = static_cast<int>(std::nearbyint(v[j] * inv));
                pair[(j / 16) * 32 + (b % 2) * 16 + j % 16] = static_cast<int8_t>(q);
                sum += q;
            }
            float* dxv = out.dxv + r * (blocks / 2) * 8 + (b / 2) * 8 + (b % 2) * 4;
            for (int lane = 0; lane < 4; ++lane) dxv[lane] = d;
            out.sx[r * blocks + b] = d * static_cast<float>(sum);
        }
    }
}

struct Q41Weights {
    const uint8_t* codes;   // [N, K / 2]
    const float* scales;    // [N, K / 32]
    const float* offsets;   // [N, K / 32]
    int64_t n, k;
};

inline float hsum8(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // (0+4) (1+5) (2+6) (3+7)
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));                                   // (0+4)+(2+6), (1+5)+(3+7)
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// sum_b a[b] * c[b] over `count` floats: 8-lane products summed per lane (fma), hsum8, then the tail in order.
inline float dot_fixed(const float* a, const float* c, int64_t count) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= count; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(c + i), acc);
    float sum = hsum8(acc);
    for (; i < count; ++i) sum = std::fma(a[i], c[i], sum);
    return sum;
}

// Integer lane sums of one block pair: lane i = sum of code * q8 over bytes 4i..4i+3 of lo/xa and of hi/xb.
template <Isa isa>
struct PairDot;

template <>
struct PairDot<Isa::avx2> {
    static inline __m256i dot(__m256i lo, __m256i hi, __m256i xa, __m256i xb) {
        // u4 x s8 byte pairs: |each i16| <= 2 * 15 * 127, the sum of two <= 7,620: no saturation
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xa), _mm256_maddubs_epi16(hi, xb));
        return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    }
};

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
// Compiled only with -mavx512vnni -mavx512vl (the VEX form, AVX-VNNI of Intel's AVX2-only cores, is the same operation).
template <>
struct PairDot<Isa::vnni256> {
    static inline __m256i dot(__m256i lo, __m256i hi, __m256i xa, __m256i xb) {
        return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, xa), hi, xb);
    }
};
#endif

// y[r0 + r, n + c] for r < R, c < C (see the file comment for the arithmetic and its order).
template <Isa isa, int R, int C>
inline void tile(const Q41Weights& w, const Q8Rows& x, float* y, int64_t y_stride, int64_t r0, int64_t n) {
    const int64_t blocks = w.k / Q_BLOCK, pairs = blocks / 2, row_bytes = w.k / 2;
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    __m256 acc[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    for (int64_t p = 0; p < pairs; ++p) {
        __m256i xa[R], xb[R];
        __m256 dx[R];
        for (int r = 0; r < R; ++r) {
            const int8_t* q8 = x.q8 + (r0 + r) * w.k + p * 64;
            xa[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8));
            xb[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32));
            dx[r] = _mm256_loadu_ps(x.dxv + (r0 + r) * pairs * 8 + p * 8);
        }
        for (int c = 0; c < C; ++c) {
            const __m256i packed =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.codes + (n + c) * row_bytes + p * 32));
            const __m256i lo = _mm256_and_si256(packed, nibble);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble);
            const __m128 d2 = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(w.scales + (n + c) * blocks + 2 * p)));
            const __m256 d = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(d2), spread);
            for (int r = 0; r < R; ++r) {
                const __m256 idot = _mm256_cvtepi32_ps(PairDot<isa>::dot(lo, hi, xa[r], xb[r]));
                acc[r][c] = _mm256_fmadd_ps(idot, _mm256_mul_ps(d, dx[r]), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c)
            y[(r0 + r) * y_stride + n + c] =
                hsum8(acc[r][c]) + dot_fixed(w.offsets + (n + c) * blocks, x.sx + (r0 + r) * blocks, blocks);
}

// y[r, n] for every row r < rows and outputs n in [n0, n1) (multiples of Q_OUTPUT_GROUP); y is [rows, y_stride].
// Rows go in tiles of up to 4, outputs in groups of 4 (at most 8 accumulators: the 16 ymm registers hold them).
template <Isa isa>
void q4_1_q8_1_product(const Q41Weights& w, const Q8Rows& x, int64_t rows, float* y, int64_t y_stride, int64_t n0,
                       int64_t n1) {
    for (int64_t r0 = 0; r0 < rows;) {
        const int64_t left = rows - r0;
        for (int64_t n = n0; n < n1; n += Q_OUTPUT_GROUP) {
            if (left >= 4) tile<isa, 4, 2>(w, x, y, y_stride, r0, n), tile<isa, 4, 2>(w, x, y, y_stride, r0, n + 2);
            else if (left == 3) tile<isa, 3, 2>(w, x, y, y_stride, r0, n), tile<isa, 3, 2>(w, x, y, y_stride, r0, n + 2);
            else if (left == 2) tile<isa, 2, 4>(w, x, y, y_stride, r0, n);
            else tile<isa, 1, 4>(w, x, y, y_stride, r0, n);
        }
        r0 += std::min<int64_t>(left, 4);
    }
}

}  // namespace specchat
