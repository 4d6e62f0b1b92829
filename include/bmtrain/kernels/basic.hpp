#pragma once
// Non-differentiable building blocks every layer uses: fills, copies, casts, in-place accumulation.
// They queue work on the compute stream. Differentiable ops live in bmtrain/ops.
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

Tensor full(const Shape& shape, float value, DType dtype = DType::f32);
Tensor ones(const Shape& shape, DType dtype = DType::f32);
Tensor full_like(const Tensor& t, float value);
Tensor zeros_like(const Tensor& t);
void fill_(const Tensor& t, float value);

// A contiguous copy of t (of any strides), in t's dtype or in `dtype`.
Tensor clone(const Tensor& t);
Tensor contiguous(const Tensor& t);  // t itself when already contiguous
// t itself when already of that dtype. To and from f8e4m3/f8e5m2 unscaled (kernels/float8.hpp
// has the scaled casts FP8 products use): rounded to nearest even and saturating, as float8.hpp.
Tensor cast(const Tensor& t, DType dtype);
// dst = src (any strides, any floating dtypes; shapes must match).
void copy_into(const Tensor& dst, const Tensor& src);
// dst += alpha * src; dst contiguous, src any strides, both floating.
void add_(const Tensor& dst, const Tensor& src, float alpha = 1.0f);
void scale_(const Tensor& t, float alpha);

}  // namespace bmt
