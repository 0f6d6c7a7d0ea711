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
// K must be a multiple of 64 and N of 4 (the default model's are); otherwise evaluate() returns false and OpenVINO
// raises.
//
// Arithmetic and its fixed order: q4_1_q8_1.hpp (llama.cpp's Q4_1 x Q8_1 dot product: each row of x quantized to
// int8 per block of 32 on its own, integer dot products with the 4-bit codes). Rows never mix and each row is
// summed in the same order whatever the number of rows or threads (threads split the N outputs), so a many-token
// verification pass computes each row bit for bit as a one-token decode pass does. Built with -mavx2 -mfma it runs
// the AVX2 kernel; with -mavx512vnni -mavx512vl added, the VNNI one (bitwise the same results).
#include <vector>

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
        if (k % 64 != 0 || n % Q_OUTPUT_GROUP != 0 || static_cast<int64_t>(codes.get_shape()[1]) * 2 != k) return false;
        int64_t rows = 1;
        for (size_t i = 0; i + 1 < x_shape.size(); ++i) rows *= static_cast<int64_t>(x_shape[i]);
        ov::Shape y_shape = x_shape;
        y_shape.back() = static_cast<size_t>(n);
        outputs[0].set_shape(y_shape);
        std::vector<int8_t> q8(static_cast<size_t>(rows * k));
        std::vector<float> dxv(static_cast<size_t>(rows * k / 8)), sx(static_cast<size_t>(rows * k / Q_BLOCK));
        const Q8Rows q{q8.data(), dxv.data(), sx.data(), k};
        quantize_rows(x.data<const float>(), rows, q);
        const Q41Weights w{codes.data<const uint8_t>(), inputs[2].data<const float>(), inputs[3].data<const float>(), n, k};
        float* y = outputs[0].data<float>();
        // one contiguous range of outputs a thread (multiples of Q_OUTPUT_GROUP)
        ov::parallel_nt(0, [&](const int thread, const int threads) {
            const int64_t chunk = ((n + threads - 1) / threads + Q_OUTPUT_GROUP - 1) / Q_OUTPUT_GROUP * Q_OUTPUT_GROUP;
            const int64_t n0 = std::min<int64_t>(n, thread * chunk);
            q4_1_q8_1_product<OP_ISA>(w, q, rows, y, n, n0, std::min<int64_t>(n, n0 + chunk));
        });
        return true;
    }
};

}  // namespace specchat

OPENVINO_CREATE_EXTENSIONS(std::vector<ov::Extension::Ptr>({std::make_shared<ov::OpExtension<specchat::Q4MatMul>>()}));
