#pragma once
// Differentiable reductions. Results have the input's dtype; accumulation is always in f32.
// The non-differentiable multi-tensor reductions (has_inf_nan, global_l2_norm) are in
// bmtrain/kernels/reduce.hpp, included here.
#include "bmtrain/kernels/reduce.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

// Sum of every element: a 0-dimensional tensor (shape [], one element), usable as a backward root.
Tensor sum(const Tensor& x);
// Sum over dimension `dim` (negative counts from the end); keepdim keeps it with size 1.
Tensor sum(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, std::int64_t dim, bool keepdim = false);

}  // namespace bmt
