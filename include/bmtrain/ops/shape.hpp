#pragma once
// Differentiable shape ops and dtype conversion.
//
// reshape and transpose return views (no copy) where the layout allows; split and concat copy.
// There is no differentiable contiguous(): every op accepts inputs of any strides and copies to
// contiguous memory itself when its kernel needs it. Not recorded by autograd, so not for a
// forward pass that is differentiated: the Tensor methods view/transpose/slice/select, and
// bmt::contiguous and bmt::cast from bmtrain/kernels/basic.hpp; use reshape, transpose, split and
// to() instead.
#include <vector>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

// A view when x is contiguous, else a contiguous copy; one dimension of `shape` may be -1.
Tensor reshape(const Tensor& x, const Shape& shape);
// Swaps two dimensions: a view, no copy.
Tensor transpose(const Tensor& x, std::int64_t d0, std::int64_t d1);
// Pieces of x along `dim` with the given sizes (summing to x.size(dim)), each contiguous.
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim);
// Joins tensors that agree in every dimension but `dim`; all must share a dtype.
Tensor concat(const std::vector<Tensor>& tensors, std::int64_t dim);
// x in another floating dtype; the gradient is converted back to x's dtype. x itself if equal.
Tensor to(const Tensor& x, DType dtype);

}  // namespace bmt
