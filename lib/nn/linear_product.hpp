#pragma once
// The matrix product of a linear layer in each form its callers fuse, on a weight and bias already
// at hand: nn::Linear applies it to its gathered parameters, the tensor-parallel layers to their
// parts between the group's collectives. With fp8 the product runs through float8_linear and the
// GELU takes a pass of its own; otherwise the GEMM's epilogue applies the GELU and the bias.
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::nn {

enum class LinearForm {
  plain,        // x W^T + b
  gelu_after,   // gelu(x W^T + b)
  gelu_before,  // gelu(x) W^T + b: the GELU's backward is done by the GEMM that makes x's gradient
};

Tensor linear_product(const Tensor& x, const Tensor& weight, const Tensor& bias, LinearForm form, bool fp8);

}  // namespace bmt::nn
