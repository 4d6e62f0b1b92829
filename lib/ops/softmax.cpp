#include "bmtrain/ops/softmax.hpp"

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/softmax.hpp"
#include "upstream_grad.hpp"

namespace bmt {

namespace {

class SoftmaxFn final : public autograd::Function {
 public:
  std::string name() const override { return "Softmax"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    BMT_REQUIRE(in[0].defined() && in[0].dim() >= 1, "softmax: expected an input with at least one dimension");
    const Tensor x = contiguous(in[0]);
    Tensor y = Tensor::empty(x.shape(), x.dtype());
    kernels::softmax_forward(x, y);
    y_ = y.detach();  // the output, saved without its history
    return {y};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (!g[0].defined()) return {Tensor()};
    Tensor dx = Tensor::empty(y_.shape(), y_.dtype());
    kernels::softmax_backward(y_, upstream_grad(g[0], y_, name()), dx);
    return {dx};
  }

  void release_saved() override { y_ = Tensor(); }

 private:
  Tensor y_;
};

}  // namespace

Tensor softmax(const Tensor& x) { return autograd::call<SoftmaxFn>({x})[0]; }

}  // namespace bmt
