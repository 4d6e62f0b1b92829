// matmul and linear over the GEMM seam, forward and backward. For C = A B:
//   dA = dC B^T,  dB = A^T dC,
// each one GEMM in which a saved operand is read with its transpose flag flipped, so neither a
// transposed view nor a saved operand is ever copied for backward.
#include "bmtrain/ops/matmul.hpp"

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/kernels/elementwise.hpp"
#include "bmtrain/kernels/gemm.hpp"
#include "bmtrain/kernels/reduce.hpp"
#include "bias_gradient.hpp"
#include "matrix_batch.hpp"

namespace bmt {

namespace {

void require_pair(const Tensor& a, const Tensor& b, const char* op, const char* a_name, const char* b_name) {
  BMT_REQUIRE(a.defined() && b.defined(), op << ": expected defined " << a_name << " and " << b_name);
  BMT_REQUIRE(is_floating(a.dtype()) && a.dtype() == b.dtype(),
              op << ": expected " << a_name << " and " << b_name << " of one floating dtype, found "
                 << dtype_name(a.dtype()) << " " << to_string(a.shape()) << " and " << dtype_name(b.dtype()) << " "
                 << to_string(b.shape()));
}

class Matmul final : public autograd::Function {
 public:
  std::string name() const override { return "matmul"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor &a = in[0], &b = in[1];
    require_pair(a, b, "matmul", "a", "b");
    BMT_REQUIRE(a.dim() >= 2 && b.dim() >= 2,
                "matmul: expected a [..., M, K] and b [..., K, N] of at least 2 dimensions, found a "
                    << to_string(a.shape()) << " and b " << to_string(b.shape()));
    BMT_REQUIRE(a.size(-1) == b.size(-2), "matmul: expected a [..., M, K] and b [K, N] with matching K, found a "
                                              << to_string(a.shape()) << " and b " << to_string(b.shape()));
    a_shape_ = a.shape();
    b_shape_ = b.shape();
    Shape out_shape = a.shape();
    out_shape.back() = b.size(-1);
    if (b.dim() == 2) {
      a_ = as_rows(a.detach());
    } else {
      bool same_batch = a.dim() == b.dim();
      for (std::int64_t d = 0; same_batch && d + 2 < a.dim(); ++d) same_batch = a.shape()[d] == b.shape()[d];
      BMT_REQUIRE(same_batch, "matmul: expected a [B..., M, K] and b [B..., K, N] with equal leading dimensions "
                              "(or b 2-D), found a "
                                  << to_string(a.shape()) << " and b " << to_string(b.shape()));
      a_ = as_matrices(a.detach());
    }
    b_ = as_matrices(b.detach());
    return {product(a_, b_, out_shape, a.dtype())};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor(), Tensor()};
    const Tensor g = contiguous(grads[0]);
    MatrixBatch dc = b_shape_.size() == 2 ? as_rows(g) : as_matrices(g);
    Tensor da, db;
    if (needs_input_grad(0)) da = product(dc, b_.transposed(), a_shape_, g.dtype());
    if (needs_input_grad(1)) db = product(a_.transposed(), dc, b_shape_, g.dtype());
    return {da, db};
  }
  void release_saved() override { a_ = b_ = MatrixBatch(); }

 private:
  Shape a_shape_, b_shape_;
  MatrixBatch a_, b_;
};

// Where a linear layer's GELU is, if it has one.
enum class GeluAt { none, input, output };

// y = x W^T + b; with a GELU at the input y = gelu(x) W^T + b: the GELU's backward then rides on
// the GEMM that computes the gradient of its output (the seam's gelu_input), instead of a pass of
// its own over the [rows, in] gradient; at the output y = gelu(x W^T + b), the GELU in the GEMM's
// epilogue (the seam's gelu_output).
class Linear final : public autograd::DeferrableFunction {
 public:
  explicit Linear(GeluAt gelu = GeluAt::none)
      : gelu_input_(gelu == GeluAt::input), gelu_output_(gelu == GeluAt::output) {}
  std::string name() const override {
    return gelu_input_ ? "gelu_linear" : gelu_output_ ? "linear_gelu" : "linear";
  }
  bool prepare_queues_work() const override { return gelu_input_ || product_in_prepare(); }

  std::vector<Tensor> prepare(const std::vector<Tensor>& in) override {
    const Tensor &x = in[0], &w = in[1], &bias = in[2];
    require_pair(x, w, "linear", "input", "weight");
    BMT_REQUIRE(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1),
                "linear: expected input [..., in] and weight [out, in] with matching in, found input "
                    << to_string(x.shape()) << " and weight " << to_string(w.shape()));
    if (bias.defined()) {
      BMT_REQUIRE(bias.dtype() == w.dtype() && bias.dim() == 1 && bias.size(0) == w.size(0),
                  "linear: expected bias [" << w.size(0) << "] in " << dtype_name(w.dtype()) << ", found "
                                            << to_string(bias.shape()) << " in " << dtype_name(bias.dtype()));
    }
    x_shape_ = x.shape();
    Tensor input = x.detach();
    if (gelu_input_) {
      // The GELU is computed here, not put off with the GEMM: backward needs its output.
      pre_gelu_ = contiguous(input);
      input = kernels::activation_forward(kernels::Activation::gelu, pre_gelu_);
    }
    x_ = as_rows(input.dim() == 1 ? contiguous(input).view({1, input.size(0)}) : input);
    w_ = as_matrices(w.detach());
    Shape out_shape = x.shape();
    out_shape.back() = w.size(0);
    std::vector<Tensor> out = {Tensor::empty(out_shape, x.dtype())};
    if (product_in_prepare()) {
      // Backward takes the GELU's derivative at its input, which the GEMM writes out alongside:
      // the GEMM runs here, not put off (backward must not need what a put-off write computes).
      pre_gelu_ = Tensor::empty(out_shape, x.dtype());
      compute(in, out[0]);
    }
    return out;
  }

  void write(const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    if (!product_in_prepare()) compute(in, out[0]);
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor(), Tensor(), Tensor()};
    // With the GELU at the output, dy is the gradient of its input.
    const Tensor g = gelu_output_
                         ? kernels::activation_backward(kernels::Activation::gelu, pre_gelu_, contiguous(grads[0]))
                         : contiguous(grads[0]);
    const MatrixBatch dy = as_rows(g.dim() == 1 ? g.view({1, g.size(0)}) : g);
    Tensor dx, dw, db;
    // With gelu_input: d pre-activation = (dy W) * gelu'(pre-activation), in the same GEMM. Else
    // added (beta = 1) into the gradient x's other consumers already gave it, when there is one.
    const Tensor partial = needs_input_grad(0) && !gelu_input_ ? partial_gradient(0) : Tensor();
    if (partial.defined() && partial.shape() == x_shape_ && partial.dtype() == g.dtype() && partial.numel() > 0 &&
        w_.rows > 0)
      multiply(dy, w_, partial, nullptr, /*accumulate=*/true, g.dtype());
    else if (needs_input_grad(0))
      dx = product(dy, w_, x_shape_, g.dtype(), gelu_input_ ? pre_gelu_.data() : nullptr);
    if (needs_input_grad(1)) {
      // Straight into the weight's gradient buffer when it has one (ZeRO blocks do, in f32): beta 0
      // over a buffer that holds no values yet, else beta 1.
      const Tensor target = leaf_gradient(1, /*will_claim=*/true);
      if (target.defined() && (target.dtype() == g.dtype() || target.dtype() == DType::f32) && dy.rows > 0)
        multiply(dy.transposed(), x_, target, nullptr, /*accumulate=*/!claim_leaf_gradient(1), g.dtype());
      else
        dw = product(dy.transposed(), x_, {w_.rows, w_.cols}, g.dtype());
    }
    if (needs_input_grad(2)) db = bias_gradient(*this, 2, g.view({dy.rows, w_.rows}));
    return {dx, dw, db};
  }
  void release_saved() override {
    x_ = w_ = MatrixBatch();
    pre_gelu_ = Tensor();
  }

 private:
  // True when the GEMM runs in prepare rather than in write.
  bool product_in_prepare() const { return gelu_output_ && is_recording(); }

  // y = the layer's output, from the inputs and what prepare saved.
  void compute(const std::vector<Tensor>& in, const Tensor& y) {
    if (y.numel() == 0) return;
    const Tensor b = in[2].defined() ? contiguous(in[2]) : Tensor();
    if (x_.cols == 0) {  // no inputs: y is the bias on every row
      y.zero_();
      if (b.defined()) y.copy_(kernels::binary(kernels::BinaryOp::add, y, b));
      if (gelu_output_) {
        if (pre_gelu_.defined()) pre_gelu_.copy_(y);
        y.copy_(kernels::activation_forward(kernels::Activation::gelu, y));
      }
      return;
    }
    if (gelu_output_)
      multiply_gelu(x_, w_.transposed(), y, b.defined() ? b.data() : nullptr,
                    pre_gelu_.defined() ? pre_gelu_.data() : nullptr);
    else
      multiply(x_, w_.transposed(), y, b.defined() ? b.data() : nullptr);
  }

  bool gelu_input_, gelu_output_;
  Shape x_shape_;
  MatrixBatch x_, w_;
  Tensor pre_gelu_;  // the GELU's input (at the input: x; at the output: x W^T + b)
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) { return autograd::call<Matmul>({a, b})[0]; }

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return autograd::call<Linear>({x, weight, bias})[0];
}

Tensor gelu_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return autograd::call<Linear>({x, weight, bias}, GeluAt::input)[0];
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return autograd::call<Linear>({x, weight, bias}, GeluAt::output)[0];
}

}  // namespace bmt
