#pragma once
// Reductions. Every sum accumulates in f32 whatever the storage dtype, except the multi-tensor sum
// of squares below.
//
// The multi-tensor checks an optimizer runs each step (inf/nan, global gradient norm) keep their
// result on the device, so a step needs at most one device-to-host read for all of them.
#include <vector>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

// An i32 tensor of shape [] holding 1 if any element of any tensor is inf or nan, else 0.
// Queued on the compute stream; nothing waits for it.
Tensor inf_nan_flag(const std::vector<Tensor>& tensors);
// inf_nan_flag read back: one device-to-host read for all the tensors.
bool has_inf_nan(const std::vector<Tensor>& tensors);
// The sum of the squares of every element of every tensor, an f32 tensor of shape [] on the device.
// It accumulates in f64 and rounds once at the end, so the result is the f32 nearest the exact sum
// however the elements are split into tensors or shards: a gradient norm summed over the shards of
// N ranks is the 1-rank norm. (An f32 running sum over millions of small squares drops most of each
// once the total is large, by more the more elements one sum holds: 0.8% of a 13M-parameter
// gradient norm at one rank against four.)
Tensor global_sum_squares(const std::vector<Tensor>& tensors);
// sqrt(global_sum_squares(tensors)), an f32 tensor of shape [] on the device.
Tensor global_l2_norm(const std::vector<Tensor>& tensors);

}  // namespace bmt

namespace bmt::kernels {

// scale * (sum of all elements), shape [], x's dtype. x contiguous.
Tensor sum_all(const Tensor& x, float scale = 1.0f);
// scale * (sum over dimension dim); keepdim keeps it with size 1. x contiguous.
Tensor sum_dim(const Tensor& x, std::int64_t dim, bool keepdim, float scale = 1.0f);
// out = (accumulate: out +) the sums of x's columns (x [rows, cols] contiguous, out [cols]
// contiguous in x's dtype or f32): a bias gradient put straight into a gradient buffer, with no
// [cols] temporary.
void column_sums(const Tensor& x, const Tensor& out, bool accumulate);
// The adjoint of sum_dim: out (shape `shape`) = scale * reduced broadcast along `dim`, where
// `reduced` has shape's elements with `dim` removed (or of size 1).
Tensor expand_dim(const Tensor& reduced, const Shape& shape, std::int64_t dim, float scale = 1.0f);
// Sums x over the dimensions NumPy broadcasting stretched from `shape` to x's shape: the gradient
// of a broadcast operand. x contiguous; returns x itself when the shapes are equal.
Tensor sum_to_shape(const Tensor& x, const Shape& shape);

}  // namespace bmt::kernels
