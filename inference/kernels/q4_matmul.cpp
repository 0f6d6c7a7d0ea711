// SpecChat's CPU kernels (tools/build_kernels.py builds them at set-up, inference/q4_kernels.py puts them in the
// graph at load, bench/q4_kernel.py measures them): blocked low-bit weight
// products as OpenVINO extension operations (loaded with ov::Core::add_extension).
//
// Q4MatMul(x) -> y       Q4_1 weights, x quantized to int8 per row (q4_1_q8_1.hpp): the measured alternative,
//                        faster but not exact enough for speculation
// Q4F32MatMul(x) -> y    Q4_1 weights, x in f32 (block_f32.hpp)
// Q8F32MatMul(x) -> y    Q8_0 weights, x in f32 (block_f32.hpp): the default model's LM head
// Q4F32Layer(attn, residual) -> y   a decoder layer from its attention output to the next layer's RMSNorm (o
//                        projection, residual, RMSNorm, SwiGLU MLP: layer_f32.hpp), Q4_1 weights, f32; see below
//   x        f32 [..., K]        activations, one row per token
//   y        f32 [..., N]        y[r, n] = sum_k x[r, k] * w[n, k]
// Attributes: n, k (int64) and the addresses (int64) of the weights, which the caller owns and keeps alive and
// unchanged as long as the op (and any model compiled from it) lives:
//   codes    Q4: u8 [N, K / 2]   4-bit codes q in 0..15, 16 bytes per block of 32 weights: Q4MatMul ggml's block
//                                layout (block_q4_1: byte j holds weight j in its low nibble, j + 16 in its high
//                                one), the f32 ops block_f32.hpp's
//            Q8: i8 [N, K]       signed codes s (the IR's u8 code minus its zero point)
//   scales   Q4MatMul: f32 [N, K / 32], the f32 ops: f16 [N, K / 32]   d of each block
//   offsets  Q4MatMul: f32 [N, K / 32]   m of each block: weight = d * q + m
//   zeros    Q4F32MatMul: f16 [N, K / 32]   z of each block: weight = d * (q - z); Q8F32MatMul: weight = d * s
// The weights are not graph inputs on purpose: OpenVINO's CPU plugin infers the output shape of an extension op with
// a dynamic input by cloning it over Constants made from every input's data, each inference (its ShapeInferFallback),
// which copied a product's whole weights every call (measured: 1.5 ms of the LM head's 3.1 ms, ~6 ms a decode step).
// K must be a multiple of 64 (Q4MatMul) or 32 (the f32 ops), and N of 4 (the default model's are); otherwise the
// op does not validate.
//
// Arithmetic and its fixed order: the headers. Rows never mix and each row is summed in the same order whatever the
// number of rows or threads (threads split the N outputs), so a many-token verification pass computes each row bit
// for bit as a one-token decode pass does. Built with -mavx2 -mfma -mf16c; the f32 ops run 16-lane tiles where the CPU
// has AVX-512F and ONEDNN_MAX_CPU_ISA does not cap OpenVINO's kernels below it (block_f32.hpp: wide_tiles), the
// AVX2 ones elsewhere, the same in every pass of a process; with -mavx512vnni -mavx512vl added, Q4MatMul
// runs the VNNI one (bitwise the same results). The f32 ops run each call as one parallel section, their outputs in
// chunks (chunks.hpp).
#include <array>
#include <functional>
#include <string>
#include <vector>

#include "block_f32.hpp"
#include "chunks.hpp"
#include "layer_f32.hpp"
#include "openvino/core/extension.hpp"
#include "openvino/core/op_extension.hpp"
#include "openvino/core/parallel.hpp"
#include "openvino/op/op.hpp"
#include "openvino/op/util/binary_elementwise_arithmetic.hpp"
#include "q4_1_q8_1.hpp"

namespace specchat {

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
constexpr Isa OP_ISA = Isa::vnni256;
#else
constexpr Isa OP_ISA = Isa::avx2;
#endif

enum class Kind { q4_q8_1, q4_f32, q8_f32 };

// Calls product(n0, n1) on one contiguous range of outputs a thread (multiples of `group`).
template <class Product>
void split_outputs(int64_t n, int64_t group, const Product& product) {
    ov::parallel_nt(0, [&](const int thread, const int threads) {
        const int64_t chunk = ((n + threads - 1) / threads + group - 1) / group * group;
        const int64_t n0 = std::min<int64_t>(n, thread * chunk);
        product(n0, std::min<int64_t>(n, n0 + chunk));
    });
}

// Calls body() once on each thread of one OpenVINO parallel section (layer_f32's team).
inline void one_section(const std::function<void()>& body) {
    ov::parallel_nt(0, [&](int, int) { body(); });
}

// Calls product(n0, n1) over [0, n) in chunks (chunks.hpp: chunk_outputs) in one parallel section.
template <class Product>
void in_chunks(int64_t n, const Product& product) {
    const int64_t size = chunk_outputs(n, parallel_get_max_threads());
    Chunks chunks((n + size - 1) / size);
    one_section([&] { chunks.run([&](int64_t i) { product(i * size, std::min(n, (i + 1) * size)); }); });
}

template <Kind kind, class Derived>
class BlockMatMul : public ov::op::Op {
public:
    BlockMatMul() = default;
    explicit BlockMatMul(const ov::Output<ov::Node>& x) : Op({x}) {}

    void validate_and_infer_types() override {
        NODE_VALIDATION_CHECK(this, get_input_size() == 1, "one input: x");
        NODE_VALIDATION_CHECK(this, get_input_element_type(0) == ov::element::f32, "x must be f32");
        NODE_VALIDATION_CHECK(this, m_codes != 0 && m_scales != 0 && (kind != Kind::q4_q8_1 || m_offsets != 0)
                                    && (kind != Kind::q4_f32 || m_zeros != 0),
                              "the weights' addresses are missing");
        NODE_VALIDATION_CHECK(this, m_k % (kind == Kind::q4_q8_1 ? 64 : Q_BLOCK) == 0 && m_n % Q_OUTPUT_GROUP == 0,
                              "K must be a multiple of 64 (Q4MatMul) or 32, N of 4");
        auto out = get_input_partial_shape(0);
        NODE_VALIDATION_CHECK(this, out.rank().is_static() && out[out.rank().get_length() - 1].compatible(m_k),
                              "x must be [..., K]");
        out[out.rank().get_length() - 1] = m_n;
        set_output_type(0, ov::element::f32, out);
    }

    bool visit_attributes(ov::AttributeVisitor& visitor) override {
        visitor.on_attribute("n", m_n);
        visitor.on_attribute("k", m_k);
        visitor.on_attribute("codes", m_codes);
        visitor.on_attribute("scales", m_scales);
        visitor.on_attribute("offsets", m_offsets);
        visitor.on_attribute("zeros", m_zeros);
        return true;
    }

    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& inputs) const override {
        auto copy = std::make_shared<Derived>(inputs.at(0));
        BlockMatMul& base = *copy;
        base.m_n = m_n, base.m_k = m_k, base.m_codes = m_codes, base.m_scales = m_scales, base.m_offsets = m_offsets;
        base.m_zeros = m_zeros;
        copy->constructor_validate_and_infer_types();
        return copy;
    }

    bool has_evaluate() const override { return true; }

    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override {
        const ov::Tensor& x = inputs[0];
        const ov::Shape x_shape = x.get_shape();
        const int64_t n = m_n, k = m_k;
        int64_t rows = 1;
        for (size_t i = 0; i + 1 < x_shape.size(); ++i) rows *= static_cast<int64_t>(x_shape[i]);
        ov::Shape y_shape = x_shape;
        y_shape.back() = static_cast<size_t>(n);
        outputs[0].set_shape(y_shape);
        float* y = outputs[0].data<float>();
        const float* xs = x.data<const float>();
        const auto* halves = reinterpret_cast<const uint16_t*>(m_scales);
        if constexpr (kind == Kind::q8_f32) {
            const Q80Weights w{reinterpret_cast<const int8_t*>(m_codes), halves, n, k};
            in_chunks(n, [&](int64_t n0, int64_t n1) { f32_product(w, xs, nullptr, rows, y, n, n0, n1); });
        } else if constexpr (kind == Kind::q4_f32) {
            const Q41HalfWeights w{reinterpret_cast<const uint8_t*>(m_codes), halves,
                                   reinterpret_cast<const uint16_t*>(m_zeros), n, k};
            std::vector<float> sums(static_cast<size_t>(rows * padded_blocks(k))), permuted(static_cast<size_t>(rows * k));
            prepare_rows(xs, rows, k, sums.data(), permuted.data());
            const float* input = tile_input(xs, permuted.data());
            in_chunks(n, [&](int64_t n0, int64_t n1) { f32_product(w, input, sums.data(), rows, y, n, n0, n1); });
        } else {
            const Q41Weights w{reinterpret_cast<const uint8_t*>(m_codes), reinterpret_cast<const float*>(m_scales),
                               reinterpret_cast<const float*>(m_offsets), n, k};
            std::vector<int8_t> q8(static_cast<size_t>(rows * k));
            std::vector<float> dxv(static_cast<size_t>(rows * k / 8)), sx(static_cast<size_t>(rows * k / Q_BLOCK));
            const Q8Rows q{q8.data(), dxv.data(), sx.data(), k};
            quantize_rows(xs, rows, q);
            split_outputs(n, Q_OUTPUT_GROUP,
                          [&](int64_t n0, int64_t n1) { q4_1_q8_1_product<OP_ISA>(w, q, rows, y, n, n0, n1); });
        }
        return true;
    }

private:
    int64_t m_n = 0, m_k = 0;                       // outputs, inputs
    int64_t m_codes = 0, m_scales = 0, m_offsets = 0, m_zeros = 0;  // addresses of the caller's weights
};

class Q4MatMul : public BlockMatMul<Kind::q4_q8_1, Q4MatMul> {
public:
    OPENVINO_OP("Q4MatMul", "specchat");
    using BlockMatMul::BlockMatMul;
};

class Q4F32MatMul : public BlockMatMul<Kind::q4_f32, Q4F32MatMul> {
public:
    OPENVINO_OP("Q4F32MatMul", "specchat");
    using BlockMatMul::BlockMatMul;
};

class Q8F32MatMul : public BlockMatMul<Kind::q8_f32, Q8F32MatMul> {
public:
    OPENVINO_OP("Q8F32MatMul", "specchat");
    using BlockMatMul::BlockMatMul;
};

// Q4F32Layer: attn and residual f32 [..., H] (the same shape), y f32 [..., H]. Attributes: hidden H, inner I, eps
// (float), the addresses of gamma f32 [H] and of four Q4_1 weights, each codes, scales and zeros as Q4F32MatMul's:
// o_* [H, H], gate_* and up_* [I, H], down_* [H, I].
// It derives from BinaryElementwiseArithmetic only for the CPU plugin's sake: for such ops the plugin infers the
// output shape as the inputs' broadcast (ShapeInferEltwise, in src/plugins/intel_cpu/src/shape_inference/
// shape_inference.cpp's make_shape_inference) instead of its ShapeInferFallback, which clones the op over the inputs'
// data every call and marks the output shape data-dependent (Reference::executeDynamicImpl then infers and redefines
// the output memory each call); y has the inputs' shape, so the broadcast is the right answer.
// The q/k/v product (y [..., N] from x [..., K]) keeps the fallback: tried as such an op (x unsqueezed to [..., 1, K],
// broadcast by a constant [ceil(N / K), 1] to [..., M, K], reshaped and split, the padding to no one), it computed the
// same rows bit for bit and its nodes took 0.2 ms less a one-token pass, but the pass took 2% longer (alternated in
// one process, 3 runs, Zen 4): the cost moved outside the nodes, to the two nodes it added per layer.
class Q4F32Layer : public ov::op::util::BinaryElementwiseArithmetic {
public:
    OPENVINO_OP("Q4F32Layer", "specchat", ov::op::util::BinaryElementwiseArithmetic);

    Q4F32Layer() : BinaryElementwiseArithmetic(ov::op::AutoBroadcastType::NUMPY) {}
    Q4F32Layer(const ov::Output<ov::Node>& attn, const ov::Output<ov::Node>& residual)
        : BinaryElementwiseArithmetic(attn, residual, ov::op::AutoBroadcastType::NUMPY) {}

    void validate_and_infer_types() override {
        NODE_VALIDATION_CHECK(this, get_input_size() == 2, "two inputs: attn, residual");
        NODE_VALIDATION_CHECK(this, get_input_element_type(0) == ov::element::f32 &&
                                    get_input_element_type(1) == ov::element::f32, "inputs must be f32");
        for (const int64_t* address : {&m_gamma, &m_o[0], &m_o[1], &m_o[2], &m_gate[0], &m_gate[1], &m_gate[2],
                                       &m_up[0], &m_up[1], &m_up[2], &m_down[0], &m_down[1], &m_down[2]})
            NODE_VALIDATION_CHECK(this, *address != 0, "a weight's address is missing");
        NODE_VALIDATION_CHECK(this, m_hidden % Q_BLOCK == 0 && m_inner % Q_BLOCK == 0,
                              "hidden and inner must be multiples of 32");
        auto out = get_input_partial_shape(1);
        NODE_VALIDATION_CHECK(this, out.rank().is_static() && out[out.rank().get_length() - 1].compatible(m_hidden)
                                    && ov::PartialShape::merge_into(out, get_input_partial_shape(0)),
                              "attn and residual must both be [..., hidden]");
        set_output_type(0, ov::element::f32, out);
    }

    bool visit_attributes(ov::AttributeVisitor& visitor) override {
        visitor.on_attribute("hidden", m_hidden);
        visitor.on_attribute("inner", m_inner);
        visitor.on_attribute("eps", m_eps);
        visitor.on_attribute("gamma", m_gamma);
        const char* parts[] = {"codes", "scales", "zeros"};
        for (int i = 0; i < 3; ++i) {
            visitor.on_attribute(std::string("o_") + parts[i], m_o[i]);
            visitor.on_attribute(std::string("gate_") + parts[i], m_gate[i]);
            visitor.on_attribute(std::string("up_") + parts[i], m_up[i]);
            visitor.on_attribute(std::string("down_") + parts[i], m_down[i]);
        }
        return true;
    }

    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& inputs) const override {
        auto copy = std::make_shared<Q4F32Layer>(inputs.at(0), inputs.at(1));
        copy->m_hidden = m_hidden, copy->m_inner = m_inner, copy->m_eps = m_eps, copy->m_gamma = m_gamma;
        copy->m_o = m_o, copy->m_gate = m_gate, copy->m_up = m_up, copy->m_down = m_down;
        copy->constructor_validate_and_infer_types();
        return copy;
    }

    bool has_evaluate() const override { return true; }

    bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override {
        const ov::Shape shape = inputs[1].get_shape();
        OPENVINO_ASSERT(inputs[0].get_shape() == shape, "Q4F32Layer: attn and residual differ in shape");
        outputs[0].set_shape(shape);
        const int64_t rows = static_cast<int64_t>(ov::shape_size(shape)) / m_hidden;
        const LayerWeights w{weights(m_o, m_hidden, m_hidden), weights(m_gate, m_inner, m_hidden),
                             weights(m_up, m_inner, m_hidden), weights(m_down, m_hidden, m_inner),
                             reinterpret_cast<const float*>(m_gamma), m_eps};
        layer_f32(w, inputs[0].data<const float>(), inputs[1].data<const float>(), rows, outputs[0].data<float>(),
                  parallel_get_max_threads(), one_section);
        return true;
    }

private:
    static Q41HalfWeights weights(const std::array<int64_t, 3>& at, int64_t n, int64_t k) {
        return {reinterpret_cast<const uint8_t*>(at[0]), reinterpret_cast<const uint16_t*>(at[1]),
                reinterpret_cast<const uint16_t*>(at[2]), n, k};
    }

    int64_t m_hidden = 0, m_inner = 0, m_gamma = 0;
    float m_eps = 0;
    std::array<int64_t, 3> m_o{}, m_gate{}, m_up{}, m_down{};  // codes, scales, zeros: addresses
};

}  // namespace specchat

OPENVINO_CREATE_EXTENSIONS(std::vector<ov::Extension::Ptr>({std::make_shared<ov::OpExtension<specchat::Q4MatMul>>(),
                                                             std::make_shared<ov::OpExtension<specchat::Q4F32MatMul>>(),
                                                             std::make_shared<ov::OpExtension<specchat::Q8F32MatMul>>(),
                                                             std::make_shared<ov::OpExtension<specchat::Q4F32Layer>>()}));
