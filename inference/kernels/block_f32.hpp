// Blocked low-bit weights times f32 activations, for x86 AVX2 (-mavx2 -mfma -mf16c), with 16-lane tiles for CPUs with
// AVX-512F (below f32_tile; chosen at run time): the exact sibling of q4_1_q8_1.hpp. The activations stay f32 (no
// int8 rounding), so a difference of 1e-9 in an input row stays ~1e-9 in the output, as in OpenVINO's own f32
// products. Shared by the standalone microbenchmark (q4_bench.cpp) and the OpenVINO extension ops (q4_matmul.cpp),
// which the engine runs on the exact f32 path (inference/q4_kernels.py). The order below is the 8-lane tiles'.
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
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
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

// The scales d of blocks b0 .. b0 + count - 1 (count <= 8) of outputs n .. n + C - 1 into d[c], and for Q4_1 each
// block's offset term, -(z_b d_b) X_b of rows r0 .. r0 + R - 1, added to offsets[r][c] (the file comment's M lanes);
// shared by the 8- and 16-lane tiles, which then differ only in how they multiply the codes.
template <int R, int C, class Weights>
inline void block_scales(const Weights& w, const float* sums, int64_t r0, int64_t n, int64_t b0, int64_t count,
                         float (&d)[C][8], __m256 (&offsets)[R][C]) {
    const int64_t blocks = w.k / Q_BLOCK, stride = padded_blocks(w.k);
    for (int c = 0; c < C; ++c) {
        const bool readable = n + c + 1 < w.n;
        const __m256 dc = halves(w.scales + (n + c) * blocks + b0, count, readable);
        _mm256_store_ps(d[c], dc);
        if constexpr (std::is_same_v<Weights, Q41HalfWeights>) {
            const __m256 zd = _mm256_mul_ps(halves(w.zeros + (n + c) * blocks + b0, count, readable), dc);  // exact
            for (int r = 0; r < R; ++r)
                offsets[r][c] = _mm256_fnmadd_ps(zd, _mm256_loadu_ps(sums + (r0 + r) * stride + b0), offsets[r][c]);
        }
    }
}

// y[r0 + r, n + c] for r < R, c < C (see the file comment for the arithmetic and its order); x is [rows, K], sums
// its block_sums (Q4_1 only; unused for Q8_0). Weights are prefetched ahead up to output row `end` (exclusive: the
// rows past it are another thread's).
template <int R, int C, class Weights>
inline void f32_tile(const Weights& w, const float* x, const float* sums, float* y, int64_t y_stride, int64_t r0,
                     int64_t n, int64_t end) {
    constexpr bool has_offsets = std::is_same_v<Weights, Q41HalfWeights>;
    const int64_t blocks = w.k / Q_BLOCK;
    __m256 acc[R][C], offsets[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = offsets[r][c] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < blocks; b0 += 8) {
        const int64_t count = std::min<int64_t>(8, blocks - b0);
        alignas(32) float d[C][8];
        block_scales<R, C>(w, sums, r0, n, b0, count, d, offsets);
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

// The 16-lane tiles, for CPUs with AVX-512 (compiled for it by the target attribute, whatever the build's flags; run
// only where wide_tiles() says so). The same weight layouts and the same kind of fixed order per row, with other lanes
// (so other roundings than the 8-lane tiles: fewer per term for Q8_0, more for Q4_1, whose bound below is 2G + 5):
//   Q4_1: the 16 bytes of a block widened to 16 lanes hold codes [0..7, 16..23] in their low nibbles and [8..15,
//         24..31] in their high ones; the tiles read x permuted the same way (prepare_rows). Per block and output the
//         16 products d_b q (q = 0..15; exact in f32: an 11-bit significand times a 4-bit integer) form a table, and
//         one permute each (_mm512_permutexvar_ps reads only an index's low 4 bits) turns the low and the high nibbles
//         into their weights d_b q_j; per row one chain of fused multiply-adds over the blocks in order,
//         A = fma(d q_hi, x_hi, fma(d q_lo, x_lo, A)); M as the 8-lane tile's; y = reduce16(A) + hsum8(M). Each term
//         d_b q_j x_j goes through at most 2G + 5 roundings (the 8-lane tiles': G + 10).
//         Why: the work of a block that does not depend on x (widen, shift, table, permutes) is done once for all the
//         tile's rows, and each row then costs two fused multiply-adds per 32 weights, where the block-sum form
//         (S_b = hi x_hi + lo x_lo, then A = fma(d_b, S_b, A)) cost three: a pass over several tokens is bound by
//         that per-row arithmetic (a one-token pass by reading the weights). A one-row tile computes 8 outputs
//         (Tiles16::SINGLE_ROW_OUTPUTS) to keep enough chains in flight. Measured on an AMD EPYC Zen 4 (2 threads,
//         quiet, against the block-sum tiles, alternating runs): the step's Q4_1 products 0.94-0.99x at 2 tokens,
//         0.89-0.98x at 5, 1.02-1.05x at 1 (q4_bench.cpp --fused --activations f32, medians of 6 runs of 40 steps;
//         bench/results/epyc-zen4/tiles16/); in the engine a 2-token pass 11.30 -> 10.61 ms (1.29 -> 1.22 one-token
//         passes), the one-token pass 8.97 -> 8.85 ms
//         (bench/pass_shapes.py, medians of 6 runs each); with 4 outputs a one-row tile the one-token pass was ~5%
//         slower (8.61 -> 9.06 ms), and two chains a row (A_lo, A_hi) ran out of registers (0.94-0.95x at 2 tokens).
//   Q8_0: w = d s formed 16 codes at a time (exact), A = fma(w, x, A) over k in increasing order; y = reduce16(A).
// reduce16 is _mm512_reduce_add_ps (a fixed tree). A row still never mixes with another, so a many-token pass computes
// each row bit for bit as a one-token pass does. Measured in the whole step's products (bench/q4_kernel/q4_bench.cpp
// --fused --activations f32, 2 threads, cold weights, Xeon with AMX, 3 runs each): 1.22x the 8-lane tiles' speed at
// 1 token, 1.26x at 2 (3.9 / 5.1 ms against 4.7 / 6.4), with the block-sum Q4_1 tiles.
#define SPECCHAT_WIDE __attribute__((target("avx512f")))

// Whether the f32 products run the 16-lane tiles: where the CPU has AVX-512F, unless ONEDNN_MAX_CPU_ISA caps
// OpenVINO's kernels below AVX-512 (as bench runs emulating an AVX2-only CPU do: then SpecChat's kernels are the
// AVX2-only CPU's too). Decided once a process, so every pass of a process computes each row the same way.
inline bool wide_tiles() {
    static const bool wide = [] {
        __builtin_cpu_init();  // a no-op once libgcc's constructor has run; needed before it
        if (!__builtin_cpu_supports("avx512f")) return false;
        const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
        if (cap == nullptr || *cap == '\0') return true;
        std::string isa(cap);
        for (char& c : isa) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        return isa.rfind("AVX512", 0) == 0 || isa.rfind("AVX10", 0) == 0 || isa == "ALL" || isa == "DEFAULT";
    }();
    return wide;
}

// X[r, b] of x [rows, k] into sums (block_sums) and, where the 16-lane tiles run, x with each block of 32 reordered as
// [0..7, 16..23, 8..15, 24..31] into permuted [rows, k]; tile_input then says which of x and permuted the Q4_1
// tiles read.
inline void prepare_rows(const float* x, int64_t rows, int64_t k, float* sums, float* permuted) {
    block_sums(x, rows, k, sums);
    if (!wide_tiles()) return;
    for (int64_t i = 0; i < rows * k; i += Q_BLOCK)
        for (int part = 0; part < 4; ++part)  // parts 0, 1, 2, 3 of the block go to 0, 2, 1, 3
            std::memcpy(permuted + i + 8 * ((part & 1) * 2 + part / 2), x + i + 8 * part, 8 * sizeof(float));
}
inline const float* tile_input(const float* x, const float* permuted) { return wide_tiles() ? permuted : x; }

template <int R, int C>
SPECCHAT_WIDE inline void f32_tile16(const Q41HalfWeights& w, const float* x, const float* sums, float* y,
                                     int64_t y_stride, int64_t r0, int64_t n, int64_t end) {
    const int64_t blocks = w.k / Q_BLOCK;
    __m512 acc[R][C];
    __m256 offsets[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps(), offsets[r][c] = _mm256_setzero_ps();
    const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int64_t b0 = 0; b0 < blocks; b0 += 8) {
        const int64_t count = std::min<int64_t>(8, blocks - b0);
        alignas(32) float d[C][8];
        block_scales<R, C>(w, sums, r0, n, b0, count, d, offsets);
        for (int64_t b = b0; b < b0 + count; ++b)
            for (int c = 0; c < C; ++c) {
                if (n + c + PREFETCH_COLUMNS < end)
                    _mm_prefetch(static_cast<const char*>(block_address(w, n + c + PREFETCH_COLUMNS, b)), _MM_HINT_T0);
                const __m512i both = _mm512_cvtepu8_epi32(
                    _mm_loadu_si128(static_cast<const __m128i*>(block_address(w, n + c, b))));
                const __m512 table = _mm512_mul_ps(_mm512_set1_ps(d[c][b - b0]), codes);  // d q, q = 0..15: exact
                const __m512 lo = _mm512_permutexvar_ps(both, table);
                const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(both, 4), table);
                for (int r = 0; r < R; ++r) {
                    const float* xr = x + (r0 + r) * w.k + b * Q_BLOCK;
                    acc[r][c] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xr + 16), _mm512_fmadd_ps(lo, _mm512_loadu_ps(xr), acc[r][c]));
                }
            }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c)
            y[(r0 + r) * y_stride + n + c] = _mm512_reduce_add_ps(acc[r][c]) + hsum8(offsets[r][c]);
}

template <int R, int C>
SPECCHAT_WIDE inline void f32_tile16(const Q80Weights& w, const float* x, const float*, float* y, int64_t y_stride,
                                     int64_t r0, int64_t n, int64_t end) {
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
            for (int i = 0; i < 2; ++i)  // w = d s, exact
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

// The tiles of f32_product, 8 or 16 lanes (Tiles::run<R, C>).
struct Tiles8 {
    static constexpr int SINGLE_ROW_OUTPUTS = 4;  // outputs a one-row tile computes (16 registers: no room for more)
    template <int R, int C, class Weights>
    static void run(const Weights& w, const float* x, const float* sums, float* y, int64_t y_stride, int64_t r0,
                    int64_t n, int64_t end) { f32_tile<R, C>(w, x, sums, y, y_stride, r0, n, end); }
};
struct Tiles16 {
    // a one-row Q4_1 tile chains two fused multiply-adds a block in each output's accumulator: 8 outputs keep 16
    // in flight, enough to hide their latency (4 outputs left a one-token pass ~5% slower than the block-sum tiles)
    static constexpr int SINGLE_ROW_OUTPUTS = 8;
    template <int R, int C, class Weights>
    SPECCHAT_WIDE static void run(const Weights& w, const float* x, const float* sums, float* y, int64_t y_stride,
                                  int64_t r0, int64_t n, int64_t end) { f32_tile16<R, C>(w, x, sums, y, y_stride, r0, n, end); }
};

template <class Tiles, class Weights>
inline void f32_rows(const Weights& w, const float* x, const float* sums, int64_t rows, float* y, int64_t y_stride,
                     int64_t n0, int64_t n1) {
    for (int64_t r0 = 0; r0 < rows;) {
        const int64_t left = rows - r0;
        if (left == 1) {
            constexpr int wide = Tiles::SINGLE_ROW_OUTPUTS;
            int64_t n = n0;
            for (; n + wide <= n1; n += wide) Tiles::template run<1, wide>(w, x, sums, y, y_stride, r0, n, n1);
            for (; n < n1; n += F32_OUTPUT_GROUP) Tiles::template run<1, F32_OUTPUT_GROUP>(w, x, sums, y, y_stride, r0, n, n1);
            break;
        }
        for (int64_t n = n0; n < n1; n += F32_OUTPUT_GROUP) {
            if (left == 5) Tiles::template run<5, 2>(w, x, sums, y, y_stride, r0, n, n1), Tiles::template run<5, 2>(w, x, sums, y, y_stride, r0, n + 2, n1);
            else if (left >= 4) Tiles::template run<4, 2>(w, x, sums, y, y_stride, r0, n, n1), Tiles::template run<4, 2>(w, x, sums, y, y_stride, r0, n + 2, n1);
            else if (left == 3) Tiles::template run<3, 2>(w, x, sums, y, y_stride, r0, n, n1), Tiles::template run<3, 2>(w, x, sums, y, y_stride, r0, n + 2, n1);
            else Tiles::template run<2, 4>(w, x, sums, y, y_stride, r0, n, n1);
        }
        r0 += left == 5 ? 5 : std::min<int64_t>(left, 4);
    }
}

// y[r, n] for every row r < rows and outputs n in [n0, n1) (multiples of F32_OUTPUT_GROUP); y is [rows, y_stride].
// Q4_1: x is tile_input(x, permuted) after prepare_rows(x, ..., sums, permuted), sums its block sums; Q8_0: x [rows,
// K] as it is, sums nullptr. The 16-lane tiles where wide_tiles(), else the 8-lane ones. Rows go in tiles of up to 4,
// or 5 when 5 are left (each tile reads and unpacks its weights once: 5 rows as 4 + 1 unpacked them twice, and a
// 5-token pass, prompt lookup's verification at K = 4, cost 3.0-3.3 one-token products against 2.6 as one tile:
// bench/q4_kernel/q4_bench.cpp, 2 threads, Xeon with AMX), outputs in groups of 4 (a single row: of
// Tiles::SINGLE_ROW_OUTPUTS while that many are left).
template <class Weights>
void f32_product(const Weights& w, const float* x, const float* sums, int64_t rows, float* y, int64_t y_stride,
                 int64_t n0, int64_t n1) {
    if (wide_tiles()) f32_rows<Tiles16>(w, x, sums, rows, y, y_stride, n0, n1);
    else f32_rows<Tiles8>(w, x, sums, rows, y, y_stride, n0, n1);
}

}  // namespace specchat
