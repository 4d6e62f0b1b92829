// Differentiable sums and means. The gradient of a sum is the output gradient broadcast back over
// the summed elements (scaled by 1/n for a mean).
#include "bmtrain/ops/reduce.hpp"

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt {

namespace {

void require_floating(const Tensor& x, const char* op) {
  BMT_REQUIRE(x.defined(), op << ": expected a defined tensor");
  BMT_REQUIRE(is_floating(x.dtype()), op << ": expected a floating tensor (f32, bf16, f16), found "
                                         << dtype_name(x.dtype()) << " " << to_string(x.shape()));
}

// scale * sum of every element.
class SumAll final : public autograd::Function {
 public:
  SumAll(bool mean) : mean_(mean) {}
  std::string name() const override { return mean_ ? "mean" : "sum"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    require_floating(in[0], mean_ ? "mean" : "sum");
    shape_ = in[0].shape();
    scale_ = mean_ ? 1.0f / static_cast<float>(in[0].numel()) : 1.0f;
    return {kernels::sum_all(contiguous(in[0]), scale_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    const std::int64_t n = numel_of(shape_);
    return {kernels::expand_dim(contiguous(grads[0]), {n}, 0, scale_).view(shape_)};
  }

 private:
  bool mean_;
  float scale_ = 1.0f;
  Shape shape_;
};

// scale * sum over one dimension.
class SumDim final : public autograd::Function {
 public:
  SumDim(std::int64_t dim, bool keepdim, bool mean) : dim_(dim), keepdim_(keepdim), mean_(mean) {}
  std::string name() const override { return mean_ ? "mean" : "sum"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const char* op = mean_ ? "mean" : "sum";
    require_floating(in[0], op);
    const std::int64_t nd = in[0].dim();
    BMT_REQUIRE(dim_ >= -nd && dim_ < nd, op << ": expected a dimension in [" << -nd << ", " << nd << ") for shape "
                                             << to_string(in[0].shape()) << ", found " << dim_);
    if (dim_ < 0) dim_ += nd;
    shape_ = in[0].shape();
    scale_ = mean_ ? 1.0f / static_cast<float>(shape_[dim_]) : 1.0f;
    return {kernels::sum_dim(contiguous(in[0]), dim_, keepdim_, scale_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    return {kernels::expand_dim(contiguous(grads[0]), shape_, dim_, scale_)};
  }

 private:
  std::int64_t dim_;
  bool keepdim_, mean_;
  float scale_ = 1.0f;
  Shape shape_;
};

}  // namespace

Tensor sum(const Tensor& x) { return autograd::call<SumAll>({x}, false)[0]; }
Tensor mean(const Tensor& x) { return autograd::call<SumAll>({x}, true)[0]; }
Tensor sum(const Tensor& x, std::int64_t dim, bool keepdim) { return autograd::call<SumDim>({x}, dim, keepdim, false)[0]; }
Tensor mean(const Tensor& x, std::int64_t dim, bool keepdim) {
  return autograd::call<SumDim>({x}, dim, keepdim, true)[0];
}

}  // namespace bmt
