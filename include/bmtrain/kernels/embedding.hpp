#pragma once
// Embedding lookup and its gradient.
//
// ids: contiguous i32/i64 of any shape (N elements); weight: contiguous [V, C]; out: contiguous,
// N * C elements of weight's dtype. Rows of out whose id is outside [0, V) are zero, and the id is
// recorded for bmtrain/kernels/index_check.hpp.
#include "bmtrain/kernels/index_check.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels {

void embedding_forward(const Tensor& ids, const Tensor& weight, const Tensor& out, BadIndexRecord bad = {});

// grad_weight = scatter-add of the rows of grad_out (N * C elements, any floating dtype) at ids;
// grad_weight is [V, C] of any floating dtype and is overwritten. Repeated ids add up, in f32.
// The CUDA build's kernel (contiguous inputs) sums each vocabulary row's contributions in token
// order, without atomics, so repeated runs give identical gradients; the portable kernel adds
// with f32 atomics (into grad_weight when it is f32, else into an f32 scratch cast once at the
// end). Out-of-range ids add nothing.
void embedding_backward(const Tensor& ids, const Tensor& grad_out, const Tensor& grad_weight);

}  // namespace bmt::kernels
