// The part of a Llama decoder layer between its attention and the next layer's RMSNorm, as one call: the output
// projection, the residual, the post-attention RMSNorm and the SwiGLU MLP, every product Q4_1 x f32 (block_f32.hpp).
// One OpenVINO extension op per layer instead of three products and a dozen element-wise nodes (q4_matmul.cpp's
// Q4F32Layer); an experiment, the engine does not use it.
//
// For each row r (one token) of attn [T, H] and residual [T, H], H the hidden size, I the MLP's:
//   o   = Wo attn[r]                                   Q4_1 [H, H] (f32_product's order)
//   r1  = residual[r] + o
//   s   = sum_k r1[k]^2 (8 f32 lanes of fused multiply-adds in increasing k, then hsum8: dot_fixed)
//   h   = (r1 * (1 / sqrt(s / H + eps))) * gamma       element-wise, each a single f32 rounding, in this order
//   g   = Wg h, u = Wu h                               Q4_1 [I, H] each
//   a   = (g / (1 + exp(-g))) * u                      SiLU(g) * u, std::exp in f32
//   y   = r1 + Wd a                                    Q4_1 [H, I]
// (Llama's RMSNorm: Zhang and Sennrich, "Root Mean Square Layer Normalization", 2019; SwiGLU: Shazeer, "GLU Variants
// Improve Transformer", 2020.) Every step reads one row only and runs in a fixed order, and threads split only the
// outputs of the products and of the element-wise steps that follow them: a many-token pass computes each row bit for
// bit as a one-token pass does, whatever the number of rows or threads.
#pragma once

#include <cmath>
#include <vector>

#include "block_f32.hpp"

namespace specchat {

struct LayerWeights {
    Q41Weights o, gate, up, down;  // [H, H], [I, H], [I, H], [H, I]
    const float* gamma;            // [H] the post-attention RMSNorm's scale
    float eps;                     // its epsilon
};

// y [rows, H] from attn and residual [rows, H] (see the file comment). `parallel(n, body)` runs body(n0, n1) over
// ranges of [0, n) that are multiples of F32_OUTPUT_GROUP, one a thread, and returns when all are done.
template <class Parallel>
void layer_f32(const LayerWeights& w, const float* attn, const float* residual, int64_t rows, float* y,
               const Parallel& parallel) {
    const int64_t hidden = w.o.n, inner = w.gate.n;
    std::vector<float> r1(static_cast<size_t>(rows * hidden)), h(r1.size()), a(static_cast<size_t>(rows * inner) * 3);
    float* g = a.data() + rows * inner;
    float* u = g + rows * inner;
    parallel(hidden, [&](int64_t n0, int64_t n1) {
        f32_product(w.o, attn, rows, r1.data(), hidden, n0, n1);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = n0; j < n1; ++j) r1[r * hidden + j] = residual[r * hidden + j] + r1[r * hidden + j];
    });
    for (int64_t r = 0; r < rows; ++r) {
        const float* x = r1.data() + r * hidden;
        const float inverse = 1.0f / std::sqrt(dot_fixed(x, x, hidden) / static_cast<float>(hidden) + w.eps);
        for (int64_t j = 0; j < hidden; ++j) h[r * hidden + j] = (x[j] * inverse) * w.gamma[j];
    }
    parallel(inner, [&](int64_t n0, int64_t n1) {
        f32_product(w.gate, h.data(), rows, g, inner, n0, n1);
        f32_product(w.up, h.data(), rows, u, inner, n0, n1);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = n0; j < n1; ++j) {
                const float gj = g[r * inner + j];
                a[r * inner + j] = (gj / (1.0f + std::exp(-gj))) * u[r * inner + j];
            }
    });
    parallel(hidden, [&](int64_t n0, int64_t n1) {
        f32_product(w.down, a.data(), rows, y, hidden, n0, n1);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = n0; j < n1; ++j) y[r * hidden + j] = r1[r * hidden + j] + y[r * hidden + j];
    });
}

}  // namespace specchat
