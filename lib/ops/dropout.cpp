#include "bmtrain/ops/dropout.hpp"

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/dropout.hpp"
#include "upstream_grad.hpp"

namespace bmt {

namespace {

class DropoutFn final : public autograd::Function {
 public:
  DropoutFn(float p, std::uint64_t key, std::uint64_t first) : p_(p), key_(key), first_(first) {}
  std::string name() const override { return "Dropout"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor x = contiguous(in[0]);
    shape_ = x.shape();
    dtype_ = x.dtype();
    Tensor y = Tensor::empty(x.shape(), x.dtype());
    kernels::dropout_apply(x, p_, key_, y, first_);
    return {y};
  }

  // The same mask and scale, regenerated from the key.
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (!g[0].defined()) return {Tensor()};
    Tensor dx = Tensor::empty(shape_, dtype_);
    kernels::dropout_apply(upstream_grad(g[0], shape_, dtype_, name()), p_, key_, dx, first_);
    return {dx};
  }

 private:
  float p_;
  std::uint64_t key_, first_;
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace

Tensor dropout(const Tensor& x, float p, std::uint64_t key, bool training, std::uint64_t first) {
  BMT_REQUIRE(x.defined(), "dropout: expected a defined input");
  BMT_REQUIRE(p >= 0.0f && p <= 1.0f, "dropout: expected a probability p in [0, 1], found " << p);
  if (!training || p == 0.0f) return x;
  return autograd::call<DropoutFn>({x}, p, key, first)[0];
}

}  // namespace bmt
