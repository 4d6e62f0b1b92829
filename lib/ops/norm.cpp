#include "bmtrain/ops/norm.hpp"

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/norm.hpp"
#include "upstream_grad.hpp"

namespace bmt {

namespace {

Shape row_stats_shape(const Tensor& x) {
  Shape s = x.shape();
  s.pop_back();
  return s;
}

// The weight and bias gradients of a norm (inputs 1 and 2 of fn). Inside a ZeRO block both
// parameters already have f32 gradient buffers: when every wanted one has a buffer, of one dtype,
// the kernel puts its column sums there and the graph gets no gradient for them. It writes them
// when every wanted buffer holds no values yet, else adds them (`accumulate`; a buffer that holds
// none is zeroed first).
// Otherwise they are new tensors of x's dtype, returned to the graph. (leaf_gradient hands out
// only buffers of the parameter's dtype, which is x's, or f32: both ones the kernel adds into.)
struct ParamGradients {
  Tensor weight, bias;
  bool in_buffers = false;  // the parameters' own gradient buffers: the graph gets nothing
  bool accumulate = false;  // added into them rather than written
};

ParamGradients param_gradients(const autograd::Function& fn, const Tensor& x, bool want_weight, bool want_bias) {
  ParamGradients p;
  const Tensor w = want_weight ? fn.leaf_gradient(1, /*will_claim=*/true) : Tensor();
  const Tensor b = want_bias ? fn.leaf_gradient(2, /*will_claim=*/true) : Tensor();
  const Tensor& first = want_weight ? w : b;
  auto has_buffer = [&](const Tensor& t, bool wanted) { return !wanted || (t.defined() && t.dtype() == first.dtype()); };
  if (first.defined() && has_buffer(w, want_weight) && has_buffer(b, want_bias)) {
    p.weight = w;
    p.bias = b;
    p.in_buffers = true;
    const bool fresh_w = want_weight && fn.claim_leaf_gradient(1);
    const bool fresh_b = want_bias && fn.claim_leaf_gradient(2);
    p.accumulate = !((fresh_w || !want_weight) && (fresh_b || !want_bias));
    if (p.accumulate && fresh_w) w.zero_();
    if (p.accumulate && fresh_b) b.zero_();
    return p;
  }
  const Shape cols{x.size(-1)};
  if (want_weight) p.weight = Tensor::empty(cols, x.dtype());
  if (want_bias) p.bias = Tensor::empty(cols, x.dtype());
  return p;
}

// The gradient the graph gets for a parameter: none when the kernel added it into the buffer.
Tensor returned(const Tensor& grad, const ParamGradients& p) { return p.in_buffers ? Tensor() : grad; }

// Where the input gradient goes: into the gradient the input's other consumers already gave it
// (a residual branch's), when the pass offers one of x's shape and dtype; the kernel then adds
// to it and the graph gets nothing for x. Otherwise a new tensor.
struct InputGradient {
  Tensor dx;
  bool add = false;
};

InputGradient input_gradient(const autograd::Function& fn, const Tensor& x) {
  if (!fn.needs_input_grad(0)) return {};
  const Tensor partial = fn.partial_gradient(0);
  if (partial.defined() && partial.shape() == x.shape() && partial.dtype() == x.dtype()) return {partial, true};
  return {Tensor::empty(x.shape(), x.dtype()), false};
}

// Inputs: x, weight, bias (weight and bias may be undefined).
class LayerNormFn final : public autograd::Function {
 public:
  explicit LayerNormFn(float eps) : eps_(eps) {}
  std::string name() const override { return "LayerNorm"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    BMT_REQUIRE(in[0].defined() && in[0].dim() >= 1, "layer_norm: expected an input with at least one dimension");
    x_ = contiguous(in[0]).detach();
    weight_ = in[1].defined() ? contiguous(in[1]).detach() : Tensor();
    has_bias_ = in[2].defined();
    Tensor y = Tensor::empty(x_.shape(), x_.dtype());
    mean_ = Tensor::empty(row_stats_shape(x_), DType::f32);
    rstd_ = Tensor::empty(row_stats_shape(x_), DType::f32);
    kernels::layer_norm_forward(x_, weight_, has_bias_ ? contiguous(in[2]) : Tensor(), eps_, y, mean_, rstd_);
    return {y};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (!g[0].defined()) return {Tensor(), Tensor(), Tensor()};
    const Tensor dy = upstream_grad(g[0], x_, name());
    const InputGradient dx = input_gradient(*this, x_);
    const ParamGradients p =
        param_gradients(*this, x_, weight_.defined() && needs_input_grad(1), has_bias_ && needs_input_grad(2));
    kernels::layer_norm_backward(dy, x_, weight_, mean_, rstd_, dx.dx, p.weight, p.bias, p.accumulate, dx.add);
    return {dx.add ? Tensor() : dx.dx, returned(p.weight, p), returned(p.bias, p)};
  }

  void release_saved() override { x_ = weight_ = mean_ = rstd_ = Tensor(); }

 private:
  float eps_;
  bool has_bias_ = false;
  Tensor x_, weight_, mean_, rstd_;
};

// Inputs: x, weight (weight may be undefined).
class RmsNormFn final : public autograd::Function {
 public:
  explicit RmsNormFn(float eps) : eps_(eps) {}
  std::string name() const override { return "RMSNorm"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    BMT_REQUIRE(in[0].defined() && in[0].dim() >= 1, "rms_norm: expected an input with at least one dimension");
    x_ = contiguous(in[0]).detach();
    weight_ = in[1].defined() ? contiguous(in[1]).detach() : Tensor();
    Tensor y = Tensor::empty(x_.shape(), x_.dtype());
    rstd_ = Tensor::empty(row_stats_shape(x_), DType::f32);
    kernels::rms_norm_forward(x_, weight_, eps_, y, rstd_);
    return {y};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (!g[0].defined()) return {Tensor(), Tensor()};
    const Tensor dy = upstream_grad(g[0], x_, name());
    const InputGradient dx = input_gradient(*this, x_);
    const ParamGradients p = param_gradients(*this, x_, weight_.defined() && needs_input_grad(1), false);
    kernels::rms_norm_backward(dy, x_, weight_, rstd_, dx.dx, p.weight, p.accumulate, dx.add);
    return {dx.add ? Tensor() : dx.dx, returned(p.weight, p)};
  }

  void release_saved() override { x_ = weight_ = rstd_ = Tensor(); }

 private:
  float eps_;
  Tensor x_, weight_, rstd_;
};

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  return autograd::call<LayerNormFn>({x, weight, bias}, eps)[0];
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) {
  return autograd::call<RmsNormFn>({x, weight}, eps)[0];
}

}  // namespace bmt
