#pragma once
// Softmax over the last dimension. x, y, dy, dx: contiguous, one floating dtype, same shape.
// Numerically stable (the row maximum is subtracted before exp); sums in f32.
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels {

void softmax_forward(const Tensor& x, const Tensor& y);
// dx = y * (dy - sum(dy * y)) per row.
void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx);

}  // namespace bmt::kernels
