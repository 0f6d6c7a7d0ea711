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
// bit as a one-token pass does, whatever the number of rows or threads. The products take their inputs' block sums
// (block_f32.hpp's block-sum form), computed once a row. The whole call is one parallel section: its five phases (o
// and the residual; the RMSNorm and h's block sums, a row a chunk; gate, up and the activation; a's block sums; down
// and the residual) are chunks.hpp's, each waiting for the one before.
#pragma once

#include <cmath>
#include <utility>
#include <vector>

#include "block_f32.hpp"
#include "chunks.hpp"

namespace specchat {

struct LayerWeights {
    Q41HalfWeights o, gate, up, down;  // [H, H], [I, H], [I, H], [H, I]
    const float* gamma;                // [H] the post-attention RMSNorm's scale
    float eps;                         // its epsilon
};

// y [rows, H] from attn and residual [rows, H] (see the file comment). `team(body)` calls body() once on each of
// `threads` threads of one parallel section and returns when all have returned.
template <class Team>
void layer_f32(const LayerWeights& w, const float* attn, const float* residual, int64_t rows, float* y, int64_t threads,
               const Team& team) {
    const int64_t hidden = w.o.n, inner = w.gate.n;
    const int64_t hidden_sums = padded_blocks(hidden), inner_sums = padded_blocks(inner);
    std::vector<float> r1(static_cast<size_t>(rows * hidden)), h(r1.size()), a(static_cast<size_t>(rows * inner) * 3);
    std::vector<float> attn_sums(static_cast<size_t>(rows * hidden_sums)), h_sums(attn_sums.size()),
        a_sums(static_cast<size_t>(rows * inner_sums));
    // the rows as the tiles read them (prepare_rows: permuted copies where the 16-lane tiles run)
    std::vector<float> attn_permuted(r1.size()), h_permuted(r1.size()), a_permuted(static_cast<size_t>(rows * inner));
    float* g = a.data() + rows * inner;
    float* u = g + rows * inner;
    prepare_rows(attn, rows, hidden, attn_sums.data(), attn_permuted.data());
    const float* attn_in = tile_input(attn, attn_permuted.data());
    const float* h_in = tile_input(h.data(), h_permuted.data());
    const float* a_in = tile_input(a.data(), a_permuted.data());
    const auto outputs = [threads](int64_t i, int64_t n) {
        const int64_t size = chunk_outputs(n, threads);
        return std::pair{i * size, std::min(n, (i + 1) * size)};
    };
    const auto chunks = [threads](int64_t n) { return (n + chunk_outputs(n, threads) - 1) / chunk_outputs(n, threads); };
    Chunks o(chunks(hidden)), norm(rows), mlp(chunks(inner)), mlp_sums(rows), down(chunks(hidden));
    team([&] {
        o.run([&](int64_t i) {
            const auto [n0, n1] = outputs(i, hidden);
            f32_product(w.o, attn_in, attn_sums.data(), rows, r1.data(), hidden, n0, n1);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t j = n0; j < n1; ++j) r1[r * hidden + j] = residual[r * hidden + j] + r1[r * hidden + j];
        });
        norm.run([&](int64_t r) {
            const float* x = r1.data() + r * hidden;
            const float inverse = 1.0f / std::sqrt(dot_fixed(x, x, hidden) / static_cast<float>(hidden) + w.eps);
            for (int64_t j = 0; j < hidden; ++j) h[r * hidden + j] = (x[j] * inverse) * w.gamma[j];
            prepare_rows(h.data() + r * hidden, 1, hidden, h_sums.data() + r * hidden_sums, h_permuted.data() + r * hidden);
        });
        mlp.run([&](int64_t i) {
            const auto [n0, n1] = outputs(i, inner);
            f32_product(w.gate, h_in, h_sums.data(), rows, g, inner, n0, n1);
            f32_product(w.up, h_in, h_sums.data(), rows, u, inner, n0, n1);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t j = n0; j < n1; ++j) {
                    const float gj = g[r * inner + j];
                    a[r * inner + j] = (gj / (1.0f + std::exp(-gj))) * u[r * inner + j];
                }
        });
        mlp_sums.run([&](int64_t r) {
            prepare_rows(a.data() + r * inner, 1, inner, a_sums.data() + r * inner_sums, a_permuted.data() + r * inner);
        });
        down.run([&](int64_t i) {
            const auto [n0, n1] = outputs(i, hidden);
            f32_product(w.down, a_in, a_sums.data(), rows, y, hidden, n0, n1);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t j = n0; j < n1; ++j) y[r * hidden + j] = r1[r * hidden + j] + y[r * hidden + j];
        });
    });
}

}  // namespace specchat
