#pragma once
// Differentiable embedding lookup.
//
//   Tensor h = bmt::embedding(ids, wte);   // ids [B, T] (i32/i64), wte [V, C] -> [B, T, C]
//
// The gradient of weight is a dense [V, C] tensor of weight's dtype: the output gradient's rows
// scatter-added at ids (repeated ids add up), accumulated in f32. ids get no gradient.
// Out-of-range ids give zero rows and are reported as described in bmtrain/kernels/index_check.hpp
// (an error right away on the host build; on CUDA when validation is turned on).
#include <cstdint>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

Tensor embedding(const Tensor& ids, const Tensor& weight);

// The lookup into rows [first_row, first_row + V) of a table split by rows, weight [V, C] being
// that part: ids outside the part give zero rows and add nothing to its gradient, and are not
// errors (another part holds them). The sum of every part's lookup is the whole table's.
Tensor embedding_part(const Tensor& ids, const Tensor& weight, std::int64_t first_row);

}  // namespace bmt
