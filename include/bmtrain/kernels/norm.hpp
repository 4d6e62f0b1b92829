#pragma once
// LayerNorm and RMSNorm kernels over the last dimension. The differentiable ops are in
// bmtrain/ops/norm.hpp; these fill tensors the caller allocated, so that a backend-specific kernel
// can replace one without touching the ops.
//
// x, y, dy, dx: contiguous [rows, C] (any leading shape), all of one floating dtype.
// weight, bias, dweight, dbias: contiguous [C] of x's dtype; undefined where absent/not wanted.
// With `accumulate`, backward adds its sums into dweight/dbias instead of writing them. Either way
// they may be f32 whatever x's dtype (both of one dtype): a gradient buffer filled in place.
// With `add_into_dx`, backward adds its input gradient to what dx holds (rounding the sum once): a
// gradient that a residual branch already put there.
// mean, rstd: f32 [rows], written by forward and read by backward. Statistics, and the reductions
// of dweight/dbias over rows, are computed in f32 whatever the storage dtype.
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels {

// y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps) (biased variance).
void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd);
void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                         bool accumulate = false, bool add_into_dx = false);

// y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps).
void rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, const Tensor& y, const Tensor& rstd);
void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                       const Tensor& dx, const Tensor& dweight, bool accumulate = false, bool add_into_dx = false);

}  // namespace bmt::kernels
