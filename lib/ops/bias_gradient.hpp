#pragma once
// The gradient of a bias added to every row: the column sums of the output gradient's rows. Inside
// a ZeRO block the bias already has an f32 gradient buffer, and the sums go straight into it
// (written over it while it holds no values yet, else added; the graph then gets no gradient for
// the bias); otherwise they are a new tensor.
#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/reduce.hpp"

namespace bmt {

// rows: the gradient [rows, features]; input `index` of fn is the bias [features].
inline Tensor bias_gradient(const autograd::Function& fn, std::size_t index, const Tensor& rows) {
  const Tensor target = fn.leaf_gradient(index, /*will_claim=*/true);
  if (target.defined() && (target.dtype() == rows.dtype() || target.dtype() == DType::f32)) {
    kernels::column_sums(rows, target, /*accumulate=*/!fn.claim_leaf_gradient(index));
    return Tensor();
  }
  return kernels::sum_dim(rows, 0, false);
}

}  // namespace bmt
