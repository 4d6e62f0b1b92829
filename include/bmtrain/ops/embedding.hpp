#pragma once
// Differentiable embedding lookup.
//
//   Tensor h = bmt::embedding(ids, wte);   // ids [B, T] (i32/i64), wte [V, C] -> [B, T, C]
//
// The gradient of weight is a dense [V, C] tensor of weight's dtype: the output gradient's rows
// scatter-added at ids (repeated ids add up), accumulated in f32. ids get no gradient.
// Out-of-range ids give zero rows and are reported as described in bmtrain/kernels/index_check.hpp
// (an error right away on the host build; on CUDA when validation is turned on).
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

Tensor embedding(const Tensor& ids, const Tensor& weight);

}  // namespace bmt
