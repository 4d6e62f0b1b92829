#pragma once
// linear_cross_entropy (ops/linear_cross_entropy.hpp) with the head's vocabulary split across the
// tensor-parallel group: no rank ever holds a row's whole logits.
//
//   Tensor h = bmt::gather_tokens(rows);                                // [N/tp, C] -> [N, C]
//   Tensor loss = bmt::vocab_parallel_cross_entropy(h, head, targets, 2048);  // head [V/tp, C]
//
// weight is this rank's rows [r*V/tp, (r+1)*V/tp) of the whole head [V, C] (r: the rank in the
// group); h [..., C] and targets (ids of the whole vocabulary, one per row of h) are the same on
// every rank. Per chunk of chunk_rows rows: this rank's logits [rows, V/tp] (one GEMM), their row
// maxima all-reduced (max) over the group, then each row's sum of exp(logit - max) and its target's
// logit (from the rank that holds the target; 0 from the others) all-reduced (sum): logsumexp and
// the loss follow on every rank alike. The chunk's logits then turn into this rank's columns of
// their gradient, as linear_cross_entropy's do (in the forward when a backward may follow, else
// made again in backward).
//
// The loss is linear_cross_entropy's on the whole head (same ignore_index and mean: over the rows
// whose target is not ignore_index; 0, with zero gradients, when every target is ignored), up to
// the order of the f32 sums, and the same on every rank. The weight's gradient is this rank's rows
// of the whole one. The gradient to h is this rank's share, from its part of the vocabulary: the
// whole is the sum over the group, which the op that made h adds up (gather_tokens' reduce-scatter,
// or copy_tp's all-reduce), so h must come from one of them. With a group of one rank this is
// linear_cross_entropy. Runs on the compute stream with `comm` (context().tp_comm() when null).
#include <cstdint>

#include "bmtrain/runtime/communicator.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

Tensor vocab_parallel_cross_entropy(const Tensor& h, const Tensor& weight, const Tensor& targets,
                                    std::int64_t chunk_rows, std::int64_t ignore_index = -100,
                                    Communicator* comm = nullptr);

}  // namespace bmt
