// Differentiable elementwise ops: forward and backward of each side by side.
#include "bmtrain/ops/elementwise.hpp"

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/autograd/kept_outputs.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/kernels/elementwise.hpp"
#include "bmtrain/kernels/reduce.hpp"
#include "bias_gradient.hpp"

namespace bmt {

namespace {

using kernels::Activation;
using kernels::BinaryOp;
using kernels::binary_name;

class Binary final : public autograd::DeferrableFunction {
 public:
  explicit Binary(BinaryOp op) : op_(op) {}
  std::string name() const override { return binary_name(op_); }

  std::vector<Tensor> prepare(const std::vector<Tensor>& in) override {
    a_shape_ = in[0].shape();
    b_shape_ = in[1].shape();
    if (op_ == BinaryOp::mul) {  // each operand's gradient needs the other
      a_ = contiguous(in[0]).detach();
      b_ = contiguous(in[1]).detach();
    }
    return {kernels::binary_output(op_, in[0], in[1])};
  }

  void write(const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    if (op_ == BinaryOp::mul) kernels::binary_into(op_, a_, b_, out[0]);
    else kernels::binary_into(op_, contiguous(in[0]), contiguous(in[1]), out[0]);
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor(), Tensor()};
    const Tensor g = contiguous(grads[0]);
    Tensor da, db;
    switch (op_) {
      case BinaryOp::add:
        if (needs_input_grad(0)) da = kernels::sum_to_shape(g, a_shape_);
        if (needs_input_grad(1)) db = kernels::sum_to_shape(g, b_shape_);
        break;
      case BinaryOp::sub:
        if (needs_input_grad(0)) da = kernels::sum_to_shape(g, a_shape_);
        if (needs_input_grad(1)) db = kernels::affine(kernels::sum_to_shape(g, b_shape_), -1.0f, 0.0f);
        break;
      case BinaryOp::mul:
        if (needs_input_grad(0)) da = kernels::sum_to_shape(kernels::binary(BinaryOp::mul, g, b_), a_shape_);
        if (needs_input_grad(1)) db = kernels::sum_to_shape(kernels::binary(BinaryOp::mul, g, a_), b_shape_);
        break;
    }
    return {da, db};
  }
  void release_saved() override { a_ = b_ = Tensor(); }

 private:
  BinaryOp op_;
  Shape a_shape_, b_shape_;
  Tensor a_, b_;
};

// alpha * x + beta.
class Affine final : public autograd::Function {
 public:
  Affine(float alpha, float beta) : alpha_(alpha), beta_(beta) {}
  std::string name() const override { return beta_ == 0.0f ? "scale" : "add_scalar"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    require_floating(in[0]);
    return {kernels::affine(contiguous(in[0]), alpha_, beta_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    if (alpha_ == 1.0f) return {grads[0]};
    return {kernels::affine(contiguous(grads[0]), alpha_, 0.0f)};
  }

 private:
  void require_floating(const Tensor& x) const {
    BMT_REQUIRE(x.defined() && is_floating(x.dtype()), name() << ": expected a floating tensor (f32, bf16, f16), found "
                                                              << (x.defined() ? dtype_name(x.dtype()) : "none"));
  }
  float alpha_, beta_;
};

class ActivationFn final : public autograd::Function {
 public:
  explicit ActivationFn(Activation act) : act_(act) {}
  std::string name() const override {
    return act_ == Activation::gelu ? "gelu" : act_ == Activation::silu ? "silu" : "relu";
  }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    x_ = contiguous(in[0]).detach();
    return {kernels::activation_forward(act_, x_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    return {kernels::activation_backward(act_, x_, contiguous(grads[0]))};
  }
  void release_saved() override { x_ = Tensor(); }

 private:
  Activation act_;
  Tensor x_;
};

class Swiglu final : public autograd::Function {
 public:
  std::string name() const override { return "swiglu"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    gate_ = contiguous(in[0]).detach();
    up_ = contiguous(in[1]).detach();
    return {kernels::swiglu_forward(gate_, up_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor(), Tensor()};
    Tensor d_gate, d_up;
    kernels::swiglu_backward(gate_, up_, contiguous(grads[0]), needs_input_grad(0) ? &d_gate : nullptr,
                             needs_input_grad(1) ? &d_up : nullptr);
    return {d_gate, d_up};
  }
  void release_saved() override { gate_ = up_ = Tensor(); }

 private:
  Tensor gate_, up_;
};

// residual + x + bias in one pass. Backward needs nothing from the forward, so the write can wait
// until the output is read (a block's recompute never reads its output). A block that keeps its
// residual_add outputs (KeptOutputs) hands the forward's back to its recompute: then x, the
// attention projection's GEMM output in a transformer block, is never read there, and that GEMM
// never runs.
class ResidualAdd final : public autograd::DeferrableFunction {
 public:
  std::string name() const override { return "residual_add"; }
  bool outputs_ready() const override { return taken_; }

  std::vector<Tensor> prepare(const std::vector<Tensor>& in) override {
    const Tensor &residual = in[0], &x = in[1], &bias = in[2];
    BMT_REQUIRE(residual.defined() && x.defined(), "residual_add: expected a defined residual and input");
    BMT_REQUIRE(is_floating(x.dtype()) && residual.dtype() == x.dtype() && residual.shape() == x.shape() &&
                    x.dim() >= 1,
                "residual_add: expected a residual and an input of one shape and floating dtype, found "
                    << dtype_name(residual.dtype()) << " " << to_string(residual.shape()) << " and "
                    << dtype_name(x.dtype()) << " " << to_string(x.shape()));
    BMT_REQUIRE(!bias.defined() || (bias.dtype() == x.dtype() && bias.shape() == Shape{x.size(-1)}),
                "residual_add: expected bias [" << x.size(-1) << "] in " << dtype_name(x.dtype()) << ", found "
                                                << dtype_name(bias.dtype()) << " " << to_string(bias.shape()));
    autograd::KeptOutputs* kept = autograd::KeptOutputs::active("residual_add");
    if (kept && kept->replaying()) {
      taken_ = true;
      return kept->take("residual_add", {{x.shape(), x.dtype()}});
    }
    std::vector<Tensor> out = {Tensor::empty(x.shape(), x.dtype())};
    if (kept) kept->put(out);  // written by write, before anything reads it
    return out;
  }

  void write(const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    kernels::residual_add_into(contiguous(in[0]), contiguous(in[1]), in[2].defined() ? contiguous(in[2]) : Tensor(),
                               out[0]);
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor(), Tensor(), Tensor()};
    const Tensor g = contiguous(grads[0]);
    Tensor db;
    if (needs_input_grad(2)) {
      std::int64_t rows = 1;  // the leading dimensions, flattened
      for (std::int64_t d = 0; d + 1 < g.dim(); ++d) rows *= g.shape()[d];
      db = bias_gradient(*this, 2, g.view({rows, g.size(-1)}));
    }
    return {needs_input_grad(0) ? g : Tensor(), needs_input_grad(1) ? g : Tensor(), db};
  }

 private:
  bool taken_ = false;  // the output came back from a KeptOutputs list
};

Tensor binary_op(BinaryOp op, const Tensor& a, const Tensor& b) {
  BMT_REQUIRE(a.defined() && b.defined(), binary_name(op) << ": expected two defined tensors");
  return autograd::call<Binary>({a, b}, op)[0];
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::mul, a, b); }

Tensor scale(const Tensor& x, float alpha) { return autograd::call<Affine>({x}, alpha, 0.0f)[0]; }
Tensor add_scalar(const Tensor& x, float value) { return autograd::call<Affine>({x}, 1.0f, value)[0]; }

Tensor gelu(const Tensor& x) { return autograd::call<ActivationFn>({x}, Activation::gelu)[0]; }
Tensor silu(const Tensor& x) { return autograd::call<ActivationFn>({x}, Activation::silu)[0]; }
Tensor relu(const Tensor& x) { return autograd::call<ActivationFn>({x}, Activation::relu)[0]; }
Tensor swiglu(const Tensor& gate, const Tensor& up) { return autograd::call<Swiglu>({gate, up})[0]; }

Tensor residual_add(const Tensor& residual, const Tensor& x, const Tensor& bias) {
  return autograd::call<ResidualAdd>({residual, x, bias})[0];
}

}  // namespace bmt
