#pragma once
// Raw data movement for shape ops: copies between tensors of any strides.
#include <vector>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels {

// dst = src elementwise in logical order; both may have any strides, dtypes may differ (floating).
void copy_strided(const Tensor& dst, const Tensor& src);
// New contiguous tensor: the inputs joined along dim.
Tensor concat(const std::vector<Tensor>& tensors, std::int64_t dim);
// Contiguous copies of consecutive pieces of x along dim.
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim);
// Checks that `sizes` (non-negative) cut dimension `dim` of x exactly; returns dim wrapped to
// [0, x.dim()). Throws bmt::Error naming the sizes and the shape otherwise.
std::int64_t split_dimension(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim);

}  // namespace bmt::kernels
