#pragma once
// Differentiable softmax cross-entropy, fused with its softmax.
//
//   Tensor loss = bmt::cross_entropy(logits, targets);   // logits [N, V], targets [N] -> f32 []
//
// logits: [..., V] of any floating dtype; targets: i32 or i64 with logits' leading shape (or flat,
// with as many elements). The result is an f32 scalar (shape []): the mean of
// logsumexp(logits_i) - logits_i[target_i] over the rows whose target is not ignore_index, in f32.
// If every target is ignored the loss is 0 and so is the gradient (not NaN, unlike 0/0).
// Forward saves one f32 logsumexp per row; backward recomputes softmax - onehot from it and
// returns the logits' gradient in their dtype. Out-of-range targets: see bmtrain/kernels/index_check.hpp.
#include <cstdint>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index = -100);

}  // namespace bmt
