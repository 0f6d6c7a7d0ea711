// An experiment (bench/q4_kernel.py builds and measures it; the engine does not use it): blocked low-bit weight
// products as OpenVINO extension operations (loaded with ov::Core::add_extension).
//
// Q4MatMul(x) -> y       Q4_1 weights, x quantized to int8 per row (q4_1_q8_1.hpp): the measured alternative,
//                        faster but not exact enough for speculation
// Q4F32MatMul(x) -> y    Q4_1 weights, x in f32 (block_f32.hpp)
// Q8F32MatMul(x) -> y    Q8_0 weights, x in f32 (block_f32.hpp): the default model's LM head
//   x        f32 [..., K]        activations, one row per token
//   y        f32 [..., N]        y[r, n] = sum_k x[r, k] * w[n, k]
// Attributes: n, k (int64) and the addresses (int64) of the weights, which the caller owns and keeps alive and
// unchanged as long as the op (and any model compiled from it) lives:
//   codes    Q4: u8 [N, K / 2]   4-bit codes q in 0..15, 16 bytes per block of 32 weights: byte j of a block holds
//                                weight j in its low nibble and weight j + 16 in its high nibble (ggml's block_q4_1)
//            Q8: i8 [N, K]       signed codes s (the IR's u8 code minus its zero point)
//   scales   f32 [N, K / 32]     d of each block
//   offsets  f32 [N, K / 32]     m of each block (Q4 only): weight = d * q + m; Q8: weight = d * s
// The weights are not graph inputs on purpose: OpenVINO's CPU plugin infers the output shape of an extension op with
// a dynamic input by cloning it over Constants made from every input's data, each inference (its ShapeInferFallback),
// which copied a product's whole weights every call (measured: 1.5 ms of the LM head's 3.1 ms, ~6 ms a decode step).
// K must be a multiple of 64 (Q4MatMul) or 32 (the f32 ops), and N of 4 (the default model's are); otherwise the
// op does not validate.
//
// Arithmetic and its fixed order: the headers. Rows never mix and each row is summed in the same order whatever the
// number of rows or threads (threads split the N outputs), so a many-token verification pass computes each row bit
// for bit as a one-token decode pass does. Built with -mavx2 -mfma it runs the AVX2 kernels; with -mavx512vnni
// -mavx512vl added, Q4MatMul runs the VNNI one (bitwise the same results).
#include <vector>

#include "block_f32.hpp"
#include "openvino/core/extension.hpp"
#include "openvino/core/op_extension.hpp"
#include "openvino/core/parallel.hpp"
#include "openvino/op/op.hpp"
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

template <Kind kind, class Derived>
class BlockMatMul : public ov::op::Op {
public:
    BlockMatMul() = default;
    explicit BlockMatMul(const ov::Output<ov::Node>& x) : Op({x}) {}

    void validate_and_infer_types() override {
        NODE_VALIDATION_CHECK(this, get_input_size() == 1, "one input: x");
        NODE_VALIDATION_CHECK(this, get_input_element_type(0) == ov::element::f32, "x must be f32");
        NODE_VALIDATION_CHECK(this, m_codes != 0 && m_scales != 0 && (kind == Kind::q8_f32 || m_offsets != 0),
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
        return true;
    }

    std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& inputs) const override {
        auto copy = std::make_shared<Derived>(inputs.at(0));
        BlockMatMul& base = *copy;
        base.m_n = m_n, base.m_k = m_k, base.m_codes = m_codes, base.m_scales = m_scales, base.m_offsets = m_offsets;
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
        const auto* scales = reinterpret_cast<const float*>(m_scales);
        if constexpr (kind == Kind::q8_f32) {
            const Q80Weights w{reinterpret_cast<const int8_t*>(m_codes), scales, n, k};
            split_outputs(n, F32_OUTPUT_GROUP, [&](int64_t n0, int64_t n1) { f32_product(w, xs, rows, y, n, n0, n1); });
        } else {
            const Q41Weights w{reinterpret_cast<const uint8_t*>(m_codes), scales, reinterpret_cast<const float*>(m_offsets), n, k};
            if constexpr (kind == Kind::q4_f32) {
                split_outputs(n, F32_OUTPUT_GROUP, [&](int64_t n0, int64_t n1) { f32_product(w, xs, rows, y, n, n0, n1); });
            } else {
                std::vector<int8_t> q8(static_cast<size_t>(rows * k));
                std::vector<float> dxv(static_cast<size_t>(rows * k / 8)), sx(static_cast<size_t>(rows * k / Q_BLOCK));
                const Q8Rows q{q8.data(), dxv.data(), sx.data(), k};
                quantize_rows(xs, rows, q);
                split_outputs(n, Q_OUTPUT_GROUP,
                              [&](int64_t n0, int64_t n1) { q4_1_q8_1_product<OP_ISA>(w, q, rows, y, n, n0, n1); });
            }
        }
        return true;
    }

private:
    int64_t m_n = 0, m_k = 0;                       // outputs, inputs
    int64_t m_codes = 0, m_scales = 0, m_offsets = 0;  // addresses of the caller's weights
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

}  // namespace specchat

OPENVINO_CREATE_EXTENSIONS(std::vector<ov::Extension::Ptr>({std::make_shared<ov::OpExtension<specchat::Q4MatMul>>(),
                                                             std::make_shared<ov::OpExtension<specchat::Q4F32MatMul>>(),
                                                             std::make_shared<ov::OpExtension<specchat::Q8F32MatMul>>()}));
