#pragma once
// The gradient reaching an op's backward, in the form its kernels take: the output's shape and
// dtype, contiguous. Upstream ops normally deliver exactly that, and then nothing is copied.
#include <string>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

inline Tensor upstream_grad(const Tensor& g, const Shape& shape, DType dtype, const std::string& op) {
  BMT_REQUIRE(g.shape() == shape, op << " backward: expected a gradient of shape " << to_string(shape) << ", found "
                                     << to_string(g.shape()));
  return contiguous(cast(g, dtype));
}

inline Tensor upstream_grad(const Tensor& g, const Tensor& like, const std::string& op) {
  return upstream_grad(g, like.shape(), like.dtype(), op);
}

}  // namespace bmt
