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
    Tensor dx = needs_input_grad(0) ? Tensor::empty(x_.shape(), x_.dtype()) : Tensor();
    Tensor dw = weight_.defined() && needs_input_grad(1) ? Tensor::empty(weight_.shape(), x_.dtype()) : Tensor();
    Tensor db = has_bias_ && needs_input_grad(2) ? Tensor::empty({x_.size(-1)}, x_.dtype()) : Tensor();
    kernels::layer_norm_backward(dy, x_, weight_, mean_, rstd_, dx, dw, db);
    return {dx, dw, db};
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
    Tensor dx = needs_input_grad(0) ? Tensor::empty(x_.shape(), x_.dtype()) : Tensor();
    Tensor dw = weight_.defined() && needs_input_grad(1) ? Tensor::empty(weight_.shape(), x_.dtype()) : Tensor();
    kernels::rms_norm_backward(dy, x_, weight_, rstd_, dx, dw);
    return {dx, dw};
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
