#pragma once
// Differentiable LayerNorm and RMSNorm over the last dimension.
//
//   Tensor h = bmt::layer_norm(x, ln.weight, ln.bias);   // [..., C] -> [..., C]
//   Tensor h = bmt::rms_norm(x, norm.weight, 1e-6f);
//
// weight and bias are [C] tensors of x's dtype and may be left undefined (Tensor()) for a norm
// without an affine part. Statistics are computed in f32 and saved (mean, 1/std: one float per
// row) for backward, which also returns the gradients of weight and bias, reduced over rows in f32.
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

Tensor layer_norm(const Tensor& x, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), float eps = 1e-5f);
Tensor rms_norm(const Tensor& x, const Tensor& weight = Tensor(), float eps = 1e-6f);

}  // namespace bmt
