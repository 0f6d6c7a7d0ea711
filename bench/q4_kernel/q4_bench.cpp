// Standalone microbenchmark of the blocked weight products (q4_1_q8_1.hpp, block_f32.hpp) on the default model's
// shapes (SmolLM2-135M: 30 layers of q 576x576, k and v 192x576, o 576x576, gate and up 1536x576, down 576x1536 as
// [outputs x inputs], then the 49,152 x 576 output layer), without OpenVINO. bench/q4_microbench.py builds it (g++
// -O3, OpenMP) once for AVX2 and once for AVX-512 VNNI and compares it with OpenVINO's compressed FullyConnected.
//
//   q4_bench [--tokens 1,2,4] [--steps 15] [--threads 2] [--activations q8_1|f32] [--fused]   prints one JSON object
//
// --activations q8_1 (default): Q4_1 x Q8_1 (int8 activations, q4_1_q8_1.hpp), every product Q4_1.
// --activations f32: Q4_1 x f32 (block_f32.hpp), and the output layer Q8_0 x f32, as the default model stores it.
// --fused: the products as the engine runs them (inference/fusion.py): q, k, v as one 960x576 product and gate, up as
// one 3072x576, 121 a step instead of 211.
// The f32 kernels run their 16-lane tiles where the CPU has AVX-512F (block_f32.hpp: wide_tiles); ONEDNN_MAX_CPU_ISA=AVX2
// in the environment runs the 8-lane ones, as on an AVX2-only CPU.
//
// All matrices are allocated (random codes, scales ~0.01, offsets -7.5 d: ~101 MB, as the model's) and a "step"
// runs them in the model's order, so each product reads its weights from memory as in a decode step, not from a warm
// cache. Each call (quantizes its T input rows, for q8_1, and) splits the N outputs into one contiguous range a
// thread (multiples of 4). Per shape: the median time of one call over all calls after the first step; per T: the
// median step (sum of its calls). Checks printed with the times: each row of a 4-row product equals, bit for bit,
// the same row computed alone; a fingerprint of the outputs (equal between the AVX2 and VNNI builds when their
// arithmetic is the same); the largest error of a product against f32 weights and f32 activations (f64 sums),
// relative to the largest |y|.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "block_f32.hpp"
#include "q4_1_q8_1.hpp"

using specchat::Isa;

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
constexpr Isa ISA = Isa::vnni256;
constexpr const char* ISA_NAME = "vnni256";
#else
constexpr Isa ISA = Isa::avx2;
constexpr const char* ISA_NAME = "avx2";
#endif

struct Matrix {
    std::string shape;  // e.g. "576x576 (q, o)"
    int64_t n, k;
    bool q8_0;                   // Q8_0 (codes s8 [N, K], no offsets) instead of Q4_1 (codes [N, K / 2])
    std::vector<uint8_t> codes;
    std::vector<float> scales, offsets;   // d and m = -z d in f32 (Q4_1 x Q8_1)
    std::vector<uint16_t> halves, zeros;  // the same d and z in f16 (the f32 kernels)

    specchat::Q41Weights q4_1() const { return {codes.data(), scales.data(), offsets.data(), n, k}; }
    specchat::Q41HalfWeights q4_1_half() const { return {codes.data(), halves.data(), zeros.data(), n, k}; }
    specchat::Q80Weights q8_0_view() const { return {reinterpret_cast<const int8_t*>(codes.data()), halves.data(), n, k}; }

    // w[n, k] in f32, for the error check; `f32`: the codes in the f32 kernels' layout (block_f32.hpp), else ggml's.
    float weight(int64_t row, int64_t col, bool f32) const {
        const int64_t b = col / 32, j = col % 32;
        if (q8_0) return scales[row * (k / 32) + b] * static_cast<float>(static_cast<int8_t>(codes[row * k + col]));
        const int64_t at = f32 ? (j / 16) * 8 + j % 8 : j % 16;
        const bool high = f32 ? j % 16 >= 8 : j >= 16;
        const uint8_t byte = codes[row * k / 2 + b * 16 + at];
        const int q = high ? byte >> 4 : byte & 15;
        return scales[row * (k / 32) + b] * static_cast<float>(q) + offsets[row * (k / 32) + b];
    }
};

static Matrix random_matrix(const std::string& shape, int64_t n, int64_t k, std::mt19937& rng, bool q8_0 = false) {
    Matrix m{shape, n, k, q8_0, std::vector<uint8_t>(q8_0 ? n * k : n * k / 2), std::vector<float>(n * k / 32),
             std::vector<float>(q8_0 ? 0 : n * k / 32)};
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(0.005f, 0.015f);
    for (auto& c : m.codes) c = static_cast<uint8_t>(byte(rng));
    for (size_t i = 0; i < m.scales.size(); ++i) {
        m.halves.push_back(_cvtss_sh(q8_0 ? scale(rng) / 16 : scale(rng), 0));  // d an f16, as the model's
        m.scales[i] = _cvtsh_ss(m.halves.back());
    }
    for (size_t i = 0; i < m.offsets.size(); ++i) m.offsets[i] = -7.5f * m.scales[i], m.zeros.push_back(_cvtss_sh(7.5f, 0));
    return m;
}

// Buffers for T rows of up to `k` columns, and the product with `threads` threads splitting the outputs.
struct Runner {
    std::vector<int8_t> q8;
    std::vector<float> dxv, sx, sums, permuted;
    int threads;
    bool f32;  // f32 activations (block_f32.hpp) instead of Q8_1

    Runner(int64_t rows, int64_t k, int threads_, bool f32_)
        : q8(rows * k), dxv(rows * k / 8), sx(rows * k / 32), sums(rows * specchat::padded_blocks(k)), permuted(rows * k), threads(threads_),
          f32(f32_) {}

    void product(const Matrix& m, const float* x, int64_t rows, float* y) {
        const specchat::Q8Rows q{q8.data(), dxv.data(), sx.data(), m.k};
        if (!f32) specchat::quantize_rows(x, rows, q);
        else if (!m.q8_0) specchat::prepare_rows(x, rows, m.k, sums.data(), permuted.data());
        const int64_t chunk = ((m.n + threads - 1) / threads + 3) / 4 * 4;
#pragma omp parallel num_threads(threads)
        {
            const int64_t n0 = std::min<int64_t>(m.n, omp_get_thread_num() * chunk);
            const int64_t n1 = std::min<int64_t>(m.n, n0 + chunk);
            if (!f32) specchat::q4_1_q8_1_product<ISA>(m.q4_1(), q, rows, y, m.n, n0, n1);
            else if (m.q8_0) specchat::f32_product(m.q8_0_view(), x, nullptr, rows, y, m.n, n0, n1);
            else specchat::f32_product(m.q4_1_half(), specchat::tile_input(x, permuted.data()), sums.data(), rows, y, m.n, n0, n1);
        }
    }
};

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

int main(int argc, char** argv) {
    std::vector<int> tokens{1, 2, 4};
    int steps = 15, threads = 2;
    bool f32 = false, fused = false;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--fused")) fused = true;
        else if (i + 1 == argc) break;
        else if (!strcmp(argv[i], "--activations")) f32 = !strcmp(argv[++i], "f32");
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tokens")) {
            tokens.clear();
            for (char* t = strtok(argv[++i], ","); t; t = strtok(nullptr, ",")) tokens.push_back(atoi(t));
        }
    }
    std::mt19937 rng(0);
    struct Shape {
        const char* label;
        int64_t n, k;
    };
    // one layer's products in order, [outputs x inputs]
    const std::vector<Shape> layer = fused
        ? std::vector<Shape>{{"960x576 (qkv)", 960, 576}, {"576x576 (o)", 576, 576}, {"3072x576 (gate_up)", 3072, 576},
                             {"576x1536 (down)", 576, 1536}}
        : std::vector<Shape>{{"576x576 (q, o)", 576, 576}, {"192x576 (k, v)", 192, 576}, {"192x576 (k, v)", 192, 576},
                             {"576x576 (q, o)", 576, 576}, {"1536x576 (gate, up)", 1536, 576},
                             {"1536x576 (gate, up)", 1536, 576}, {"576x1536 (down)", 576, 1536}};
    std::vector<Matrix> step;  // the model's products in order (211, or 121 fused)
    for (int l = 0; l < 30; ++l)
        for (const Shape& shape : layer) step.push_back(random_matrix(shape.label, shape.n, shape.k, rng));
    step.push_back(random_matrix(f32 ? "49152x576 Q8_0 (output)" : "49152x576 (output)", 49152, 576, rng, f32));
    double weight_bytes = 0;
    for (const auto& m : step)  // the f32 kernels' d and z in f16, Q4_1 x Q8_1's d and m in f32
        weight_bytes += m.codes.size() + (f32 ? 2.0 : 4.0) * (m.scales.size() + m.offsets.size());

    const int max_t = *std::max_element(tokens.begin(), tokens.end());
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> x(std::max(max_t, 4) * 1536), y(std::max(max_t, 4) * 49152), alone(49152);
    for (auto& v : x) v = normal(rng);
    Runner runner(std::max(max_t, 4), 1536, threads, f32);

    // Checks: rows bitwise equal alone and together, the fingerprint, the error against f32.
    bool rows_equal = true;
    uint64_t fingerprint = 1469598103934665603ull;
    double worst_error = 0;
    for (size_t i : {size_t(0), size_t(1), size_t(2), size_t(3), step.size() - 1}) {
        const Matrix& m = step[i];
        runner.product(m, x.data(), 4, y.data());
        for (int r = 0; r < 4; ++r) {
            runner.product(m, x.data() + r * m.k, 1, alone.data());
            rows_equal &= !memcmp(alone.data(), y.data() + r * m.n, m.n * sizeof(float));
        }
        const unsigned char* bytes = reinterpret_cast<const unsigned char*>(y.data());
        for (size_t b = 0; b < 4 * m.n * sizeof(float); ++b) fingerprint = (fingerprint ^ bytes[b]) * 1099511628211ull;
        double largest = 0, error = 0;
        for (int64_t n = 0; n < std::min<int64_t>(m.n, 512); ++n) {
            double exact = 0;
            for (int64_t c = 0; c < m.k; ++c) exact += static_cast<double>(m.weight(n, c, f32)) * x[c];
            largest = std::max(largest, std::fabs(exact));
            error = std::max(error, std::fabs(exact - y[n]));
        }
        worst_error = std::max(worst_error, error / largest);
    }

    printf("{\"isa\": \"%s\", \"activations\": \"%s\", \"products\": %zu, \"threads\": %d, \"steps\": %d, \"weight_mb\": %.1f, \"rows_bitwise_equal\": %s, "
           "\"fingerprint\": \"%016llx\", \"relative_error\": %.3g, \"tokens\": {",
           ISA_NAME, f32 ? "f32" : "q8_1", step.size(), threads, steps, weight_bytes / 1e6, rows_equal ? "true" : "false",
           static_cast<unsigned long long>(fingerprint), worst_error);
    for (size_t ti = 0; ti < tokens.size(); ++ti) {
        const int t = tokens[ti];
        std::map<std::string, std::vector<double>> calls;
        std::vector<double> step_ms;
        for (int s = 0; s < steps + 1; ++s) {
            double total = 0;
            for (const auto& m : step) {
                const auto start = std::chrono::steady_clock::now();
                runner.product(m, x.data(), t, y.data());
                const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
                total += ms;
                if (s > 0) calls[m.shape].push_back(ms);
            }
            if (s > 0) step_ms.push_back(total);
        }
        printf("%s\"%d\": {\"step_ms\": %.4f, \"calls_ms\": {", ti ? ", " : "", t, median(step_ms));
        bool first = true;
        for (auto& [shape, v] : calls) printf("%s\"%s\": %.5f", first ? "" : ", ", shape.c_str(), median(v)), first = false;
        printf("}}");
    }
    printf("}}\n");
    return rows_equal ? 0 : 1;
}
