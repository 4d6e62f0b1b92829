#pragma once
// Differentiable softmax over the last dimension (numerically stable; f32 sums). Backward uses the
// saved output: dx = y * (dy - sum(dy * y)).
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

Tensor softmax(const Tensor& x);

}  // namespace bmt
