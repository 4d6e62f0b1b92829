#include "bmtrain/ops/rotary.hpp"

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/rotary.hpp"
#include "upstream_grad.hpp"

namespace bmt {

namespace {

// Inputs: x (positions travel as a member: they are not differentiable).
class RotaryFn final : public autograd::Function {
 public:
  RotaryFn(Tensor positions, std::int64_t offset, const RotaryFrequencies& frequencies, RotaryLayout layout)
      : positions_(std::move(positions)),
        offset_(offset),
        frequencies_(frequencies),
        seq_dim_(layout == RotaryLayout::BTHD ? 1 : 2) {}
  std::string name() const override { return "RotaryEmbedding"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    BMT_REQUIRE(in[0].defined(), "rotary_embedding: expected a defined input");
    const Tensor& x = in[0];
    shape_ = x.shape();
    dtype_ = x.dtype();
    Tensor y = Tensor::empty(x.shape(), x.dtype());
    kernels::rotary_apply(x, positions_, offset_, frequencies_, seq_dim_, /*inverse=*/false, y);
    return {y};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (!g[0].defined()) return {Tensor()};
    Tensor dx = Tensor::empty(shape_, dtype_);
    kernels::rotary_apply(upstream_grad(g[0], shape_, dtype_, name()), positions_, offset_, frequencies_, seq_dim_,
                          /*inverse=*/true, dx);
    return {dx};
  }

  void release_saved() override { positions_ = Tensor(); }

 private:
  Tensor positions_;
  std::int64_t offset_;
  RotaryFrequencies frequencies_;
  int seq_dim_;
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace

Tensor rotary_embedding(const Tensor& x, std::int64_t offset, const RotaryFrequencies& frequencies,
                        RotaryLayout layout) {
  return autograd::call<RotaryFn>({x}, Tensor(), offset, frequencies, layout)[0];
}

Tensor rotary_embedding(const Tensor& x, const Tensor& positions, const RotaryFrequencies& frequencies,
                        RotaryLayout layout) {
  BMT_REQUIRE(positions.defined(), "rotary_embedding: expected a positions tensor");
  return autograd::call<RotaryFn>({x}, contiguous(positions), std::int64_t{0}, frequencies, layout)[0];
}

Tensor rotary_embedding(const Tensor& x, std::int64_t offset, float theta, RotaryLayout layout) {
  return rotary_embedding(x, offset, RotaryFrequencies{theta}, layout);
}

Tensor rotary_embedding(const Tensor& x, const Tensor& positions, float theta, RotaryLayout layout) {
  return rotary_embedding(x, positions, RotaryFrequencies{theta}, layout);
}

}  // namespace bmt
