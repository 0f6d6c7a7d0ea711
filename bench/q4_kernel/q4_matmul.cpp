// An experiment (bench/q4_kernel.py builds and measures it; the engine does not use it): 4-bit blocked weights
// times row-wise int8 activations, as an OpenVINO extension operation (loaded with ov::Core::add_extension).
//
// Q4MatMul(x, codes, scales, offsets) -> y
//   x        f32 [..., K]        activations, one row per token
//   codes    u8  [N, K / 2]      4-bit codes q in 0..15, 16 bytes per block of 32 weights: byte j of a block holds
//                                weight j in its low nibble and weight j + 16 in its high nibble (ggml's block_q4_1)
//   scales   f32 [N, K / 32]     d of each block
//   offsets  f32 [N, K / 32]     m of each block: weight = d * q + m
//   y        f32 [..., N]        y[r, n] = sum_k x[r, k] * w[n, k], with x quantized as below
//
// Arithmetic (llama.cpp's Q4_1 x Q8_1 dot product, ggml-cpu/arch/x86/quants.c): each row of x is cut into blocks of
// 32 and quantized to int8 with its own scale dx = max|x| / 127 (q8 = round(x / dx)) and the block's sum
// sx = dx * sum(q8). Then per block the integer dot product sum_j q[j] * q8[j] (AVX2 vpmaddubsw/vpmaddwd) gives
//   sum_j w[j] x[j] ~= d * dx * idot + m * sx.
// Rows never mix: row r's result depends only on row r of x and on the weights, summed in the same order whatever
// the number of rows or threads (threads split the N outputs). So a many-token verification pass computes each
// row bit for bit as a one-token decode pass does, which keeps greedy speculative decoding identical to plain
// decoding. The quantization of x is the only approximation (as llama.cpp's, relative error ~1e-3 per product).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "openvino/core/extension.hpp"
#include "openvino/core/op_extension.hpp"
#include "openvino/core/parallel.hpp"
#include "openvino/op/op.hpp"

namespace specchat {

constexpr int64_t BLOCK = 32;        // weights per block
constexpr int64_t BLOCK_BYTES = 16;  // bytes of codes per block
constexpr int64_t OUTPUT_GROUP = 4;  // outputs computed together (N must be a multiple)
constexpr int64_t N_TILE = 32;       // outputs per parallel task (a multiple of OUTPUT_GROUP)

// Row-wise int8 quantization of x [rows, K] (K a multiple of 32): codes q8 [rows, K], per block dx and sx.
static void quantize_rows(const float* x, int64_t rows, int64_t k, int8_t* q8, float* dx, float* sx) {
    const int64_t blocks = k / BLOCK;
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < blocks; ++b) {
            const float* v = x + r * k + b * BLOCK;
            float amax = 0.f;
            for (int j = 0; j < BLOCK; ++j) amax = std::max(amax, std::fabs(v[j]));
            const float d = amax / 127.f;
            const float inv = d > 0.f ? 1.f / d : 0.f;
            int sum = 0;
            int8_t* out = q8 + r * k + b * BLOCK;
            for (int j = 0; j < BLOCK; ++j) {
                const int q = static_cast<int>(std::nearbyint(v[j] * inv));
                out[j] = static_cast<int8_t>(q);
                sum += q;
            }
            dx[r * blocks + b] = d;
            sx[r * blocks + b] = d * static_cast<float>(sum);
        }
    }
}

static inline float horizontal_sum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

// The 32 codes of one block in natural order, as unsigned bytes.
static inline __m256i unpack_block(const uint8_t* block) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0F));
}

// sum_b a[b] * b_[b] over `count` floats, in a fixed order: 8-lane partial sums, their horizontal sum, then the tail.
static inline float dot_fixed(const float* a, const float* b, int64_t count) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= count; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float sum = horizontal_sum(acc);
    for (; i < count; ++i) sum = std::fma(a[i], b[i], sum);
    return sum;
}

struct Operands {
    const uint8_t* codes;   // [N, blocks * 16]
    const float* scales;    // [N, blocks]
    const float* offsets;   // [N, blocks]
    const int8_t* q8;       // [rows, K]
    const float* dx;        // [rows, blocks]
    const float* sx;        // [rows, blocks]
    float* y;               // [rows, N]
    int64_t k, blocks, n_total;
};

// y for R rows from r0 and C outputs from n. Every (row, output) pair runs the same operations in the same order
// whatever R and C are, so a row's result does not depend on how many rows are computed with it.
template <int R, int C>
static void tile(const Operands& o, int64_t r0, int64_t n) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < o.blocks; ++b) {
        __m256i xq[R];
        __m256 dx[R];
        for (int r = 0; r < R; ++r) {
            xq[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o.q8 + (r0 + r) * o.k + b * BLOCK));
            dx[r] = _mm256_set1_ps(o.dx[(r0 + r) * o.blocks + b]);
        }
        for (int c = 0; c < C; ++c) {
            const __m256i q = unpack_block(o.codes + ((n + c) * o.blocks + b) * BLOCK_BYTES);
            const __m256 d = _mm256_set1_ps(o.scales[(n + c) * o.blocks + b]);
            for (int r = 0; r < R; ++r) {
                // u4 x s8 pairs: |sum of 2| <= 2 * 15 * 127, no saturation
                const __m256i quads = _mm256_madd_epi16(_mm256_maddubs_epi16(q, xq[r]), ones);
                acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(quads), dx[r]), d, acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c)
            o.y[(r0 + r) * o.n_total + n + c] = horizontal_sum(acc[r][c]) +
                dot_fixed(o.offsets + (n + c) * o.blocks, o.sx + (r0 + r) * o.blocks, o.blocks);
}

// Outputs [n0, n1) (multiples of OUTPUT_GROUP) for every row.
static void product_range(const Operands& o, int64_t rows, int64_t n0, int64_t n1) {
    for (int64_t r0 = 0; r0 < rows;) {
        const int64_t left = rows - r0;
        for (int64_t n = n0; n < n1; n += OUTPUT_GROUP) {
            if (left >= 4) tile<4, 2>(o, r0, n), tile<4, 2>(o, r0, n + 2);
            else if (left == 3) tile<3, 2>(o, r0, n), tile<3, 2>(o, r0, n + 2);
            else if (left == 2) tile<2, 4>(o, r0, n);
            else tile<1, 4>(o, r0, n);
        }
        r0 += std::min<int64_t>(left, 4);
    }
}

class Q4MatMul : public ov::op::Op {
public:
    OPENVINO_OP("Q4MatMul", "specchat");

    Q4MatMul() = default;
    Q4MatMul(const ov::Output<ov::Node>& x, const ov::Output<ov::Node>& codes, const ov::Output<ov::Node>& scales,
             const ov::Output<ov::Node>& offsets)
        : Op({x, codes, scales, offsets}) {
        constructor_validate_and_infer_types();
    }

    void validate_and_infer_types() override {
        const auto& x = get_input_partial_shape(0);
        const auto& codes = get_input_partial_shape(1);
        NODE_VALIDATION_CHECK(this, get_input_element_type(0) == ov::element::f32, "x must be f32");
        NODE_VALIDATION_CHECK(this, get_input_element_type(1) == ov::element::u8, "codes must be u8");
        NODE_VALIDATION_CHECK(this, codes.rank().is_static() && codes.rank().get_length() == 2, "codes must be [N, K/2]");
        auto out = x;
        if (x.rank().is_static()) out[x.rank().get_length() - 1] = codes[0];
        set_output_type(0, ov::element::f32, out);
    }

    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& inputs) const override {
        return std::make_shared<Q4MatMul>(inputs.at(0), inputs.at(1), inputs.at(2), inputs.at(3));
    }

    bool visit_attributes(ov::AttributeVisitor&) override { return true; }

    bool has_evaluate() const override { return true; }

    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override {
        const ov::Tensor& x = inputs[0];
        const ov::Tensor& codes = inputs[1];
        const ov::Shape x_shape = x.get_shape();
        const int64_t k = static_cast<int64_t>(x_shape.back());
        const int64_t n = static_cast<int64_t>(codes.get_shape()[0]);
        if (k % BLOCK != 0 || n % OUTPUT_GROUP != 0 || static_cast<int64_t>(codes.get_shape()[1]) * 2 != k) return false;
        int64_t rows = 1;
        for (size_t i = 0; i + 1 < x_shape.size(); ++i) rows *= static_cast<int64_t>(x_shape[i]);
        ov::Shape y_shape = x_shape;
        y_shape.back() = static_cast<size_t>(n);
        outputs[0].set_shape(y_shape);
        const int64_t blocks = k / BLOCK;
        std::vector<int8_t> q8(static_cast<size_t>(rows * k));
        std::vector<float> dx(static_cast<size_t>(rows * blocks)), sx(static_cast<size_t>(rows * blocks));
        quantize_rows(x.data<const float>(), rows, k, q8.data(), dx.data(), sx.data());
        const Operands operands{codes.data<const uint8_t>(), inputs[2].data<const float>(), inputs[3].data<const float>(),
                                q8.data(), dx.data(), sx.data(), outputs[0].data<float>(), k, blocks, n};
        const int64_t n_tasks = (n + N_TILE - 1) / N_TILE;
        ov::parallel_for(static_cast<size_t>(n_tasks), [&](size_t task) {
            const int64_t n0 = static_cast<int64_t>(task) * N_TILE;
            product_range(operands, rows, n0, std::min(n, n0 + N_TILE));
        });
        return true;
    }
};

}  // namespace specchat

OPENVINO_CREATE_EXTENSIONS(std::vector<ov::Extension::Ptr>({std::make_shared<ov::OpExtension<specchat::Q4MatMul>>()}));
