#pragma once
// The tensor-parallel group's collectives as differentiable ops (Megatron's f/g and its sequence-
// parallel all-gather/reduce-scatter). Between tensor-parallel layers an activation is held
// sequence-parallel: rank r of the group holds rows [r*N/tp, (r+1)*N/tp) of the [N, ...] token
// matrix, so every collective here is a plain contiguous one over dimension 0.
//
//   Tensor x = bmt::gather_tokens(rows);      // [N/tp, d] -> [N, d]   (backward: reduce-scatter)
//   Tensor y = bmt::scatter_tokens(partial);  // [N, d] partial sums -> [N/tp, d] summed rows
//   Tensor s = bmt::reduce_tp(partial);       // all-reduce sum        (backward: identity)
//   Tensor w = bmt::copy_tp(weight);          // identity              (backward: all-reduce sum)
//
// copy_tp is how a replicated parameter (a norm's weight, a row-parallel layer's bias) is used on
// sequence-parallel rows: each rank's gradient covers its own rows only, and the all-reduce makes
// the parameter's gradient the sum over the group, as one rank holding every row would have it.
//
// Every op runs on the compute stream with `comm` (context().tp_comm() when null). With a group of
// one rank each returns its input itself: no copy, no collective, no graph node.
#include "bmtrain/runtime/communicator.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

// x [n, ...] on every rank (the same n) -> [n * group, ...], rank r's rows at [r*n, (r+1)*n).
Tensor gather_tokens(const Tensor& x, Communicator* comm = nullptr);
// x [N, ...] with N divisible by the group size -> [N / group, ...]: this rank's rows of the sum
// over the group.
Tensor scatter_tokens(const Tensor& x, Communicator* comm = nullptr);
// The sum of x over the group, on every rank.
Tensor reduce_tp(const Tensor& x, Communicator* comm = nullptr);
// x itself; its gradient is the sum of the ranks' gradients.
Tensor copy_tp(const Tensor& x, Communicator* comm = nullptr);

}  // namespace bmt
