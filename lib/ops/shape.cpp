// Differentiable shape ops and dtype conversion. Their gradients move data back the way it came:
// reshape back, transpose back, split <-> concat, cast back to the input's dtype.
//
// reshape and split copy nothing when the strides allow: split returns slices of its input, and
// reshape views them (the fused QKV projection [B, T, 3C] splits into three [B, T, C] slices, each
// viewed as [B, T, H, D]). On the way back, gradients that already lie side by side in one buffer,
// as attention writes them for a fused projection, join with no copy either.
#include "bmtrain/ops/shape.hpp"

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/kernels/shape.hpp"

namespace bmt {

namespace {

class Reshape final : public autograd::Function {
 public:
  explicit Reshape(Shape shape) : shape_(std::move(shape)) {}
  std::string name() const override { return "reshape"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    BMT_REQUIRE(in[0].defined(), "reshape: expected a defined tensor");
    input_shape_ = in[0].shape();
    return {reshaped(in[0], shape_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    return {reshaped(grads[0], input_shape_)};
  }
  static Tensor reshaped(const Tensor& t, const Shape& shape) {
    return t.can_view(shape) ? t.view(shape) : contiguous(t).view(shape);
  }

 private:
  Shape shape_, input_shape_;
};

class Transpose final : public autograd::Function {
 public:
  Transpose(std::int64_t d0, std::int64_t d1) : d0_(d0), d1_(d1) {}
  std::string name() const override { return "transpose"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    BMT_REQUIRE(in[0].defined(), "transpose: expected a defined tensor");
    return {in[0].transpose(d0_, d1_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    // Contiguous, so the op upstream gets the layout most kernels read.
    return {contiguous(grads[0].transpose(d0_, d1_))};
  }

 private:
  std::int64_t d0_, d1_;
};

class Split final : public autograd::Function {
 public:
  Split(std::vector<std::int64_t> sizes, std::int64_t dim) : sizes_(std::move(sizes)), dim_(dim) {}
  std::string name() const override { return "split"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    // The pieces are slices of the input, not copies.
    const Tensor& x = in[0];
    const std::int64_t d = kernels::split_dimension(x, sizes_, dim_);
    dim_ = d;  // wrapped, for backward
    shape_ = x.shape();
    dtype_ = x.dtype();
    std::vector<Tensor> pieces;
    std::int64_t start = 0;
    for (auto s : sizes_) {
      pieces.push_back(x.slice(d, start, start + s));
      start += s;
    }
    return pieces;
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const std::int64_t d = dim_;
    if (Tensor joined = side_by_side(grads, d); joined.defined()) return {joined};
    std::vector<Tensor> pieces;
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      if (i < grads.size() && grads[i].defined()) {
        pieces.push_back(grads[i]);
      } else {  // a piece nothing used: its gradient is zero
        Shape s = shape_;
        s[d] = sizes_[i];
        pieces.push_back(Tensor::zeros(s, dtype_));
      }
    }
    return {kernels::concat(pieces, d)};
  }

 private:
  // The whole gradient as a view, when the pieces' gradients are the slices of one buffer that
  // split would have cut: same storage, dtype and strides, each starting where the previous ends
  // along `d`. Undefined otherwise.
  Tensor side_by_side(const std::vector<Tensor>& grads, std::int64_t d) const {
    if (grads.size() != sizes_.size() || grads.empty()) return Tensor();
    const Tensor& first = grads[0];
    if (!first.defined() || !first.storage()) return Tensor();
    std::int64_t start = 0;
    for (std::size_t i = 0; i < grads.size(); ++i) {
      const Tensor& g = grads[i];
      if (!g.defined() || g.storage() != first.storage() || g.dtype() != first.dtype() ||
          g.strides() != first.strides() || g.dim() != static_cast<std::int64_t>(shape_.size()))
        return Tensor();
      const auto expected = first.impl()->offset + static_cast<std::size_t>(start * first.strides()[d]);
      if (g.impl()->offset != expected) return Tensor();
      for (std::int64_t e = 0; e < g.dim(); ++e)
        if (g.size(e) != (e == d ? sizes_[i] : shape_[static_cast<std::size_t>(e)])) return Tensor();
      start += sizes_[i];
    }
    return first.as_strided(shape_, first.strides(), first.impl()->offset);
  }

  std::vector<std::int64_t> sizes_;
  std::int64_t dim_;
  Shape shape_;
  DType dtype_ = DType::f32;
};

class Concat final : public autograd::Function {
 public:
  explicit Concat(std::int64_t dim) : dim_(dim) {}
  std::string name() const override { return "concat"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    Tensor out = kernels::concat(in, dim_);
    sizes_.clear();
    if (dim_ < 0) dim_ += out.dim();
    for (const Tensor& t : in) sizes_.push_back(t.size(dim_));
    return {out};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return std::vector<Tensor>(sizes_.size());
    std::vector<Tensor> pieces = kernels::split(grads[0], sizes_, dim_);
    for (std::size_t i = 0; i < pieces.size(); ++i)
      if (!needs_input_grad(i)) pieces[i] = Tensor();
    return pieces;
  }

 private:
  std::int64_t dim_;
  std::vector<std::int64_t> sizes_;
};

class To final : public autograd::Function {
 public:
  explicit To(DType dtype) : dtype_(dtype) {}
  std::string name() const override { return "to"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    BMT_REQUIRE(in[0].defined(), "to: expected a defined tensor");
    BMT_REQUIRE(is_floating(in[0].dtype()) && is_floating(dtype_),
                "to: expected a conversion between floating dtypes (f32, bf16, f16), found "
                    << dtype_name(in[0].dtype()) << " to " << dtype_name(dtype_));
    input_dtype_ = in[0].dtype();
    return {cast(in[0], dtype_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (!grads[0].defined()) return {Tensor()};
    return {cast(grads[0], input_dtype_)};
  }

 private:
  DType dtype_, input_dtype_ = DType::f32;
};

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) { return autograd::call<Reshape>({x}, shape)[0]; }
Tensor transpose(const Tensor& x, std::int64_t d0, std::int64_t d1) {
  return autograd::call<Transpose>({x}, d0, d1)[0];
}
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim) {
  return autograd::call<Split>({x}, sizes, dim);
}
Tensor concat(const std::vector<Tensor>& tensors, std::int64_t dim) {
  return autograd::call<Concat>(tensors, dim)[0];
}
Tensor to(const Tensor& x, DType dtype) { return autograd::call<To>({x}, dtype)[0]; }

}  // namespace bmt
