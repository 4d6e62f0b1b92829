#pragma once
// Softmax cross-entropy over logits whose vocabulary is split across a group of ranks: each rank
// holds logits [n, Vp] for the vocabulary's columns [first, first + Vp) of the whole V. The
// logsumexp of a row is the group's: the caller combines the ranks' partial results between the
// steps (ops/vocab_parallel_cross_entropy.hpp):
//   1. vocab_part_max      this part's row maxima           -> all-reduce max over the group
//   2. vocab_part_sums     sum of exp(x - max) over the part, and the target's logit where the
//                          part holds the target (0 elsewhere) -> all-reduce sum over the group
//   3. vocab_parallel_loss logsumexp, the rows' mean loss and count, on every rank alike
// Backward: vocab_part_backward, this part's columns of the whole row's gradient.
//
// logits: contiguous [n, Vp], f32, bf16 or f16; targets: contiguous, n elements, i32 or i64, ids of
// the whole vocabulary. row_max, lse: f32 [n]; stats: contiguous f32 [2, n] (sums, target logits).
// A row counts when its target is in [0, V) and not ignore_index; a target outside [0, V) other than
// ignore_index is left out and recorded for bmtrain/kernels/index_check.hpp.
#include <cstdint>

#include "bmtrain/kernels/index_check.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels {

void vocab_part_max(const Tensor& logits, const Tensor& row_max);
void vocab_part_sums(const Tensor& logits, const Tensor& targets, std::int64_t first, const Tensor& row_max,
                     const Tensor& stats);
// loss, count: f32 scalars: the mean over the n rows that count, and their number (as
// cross_entropy_forward writes them, so that cross_entropy_combine folds chunks of either).
void vocab_parallel_loss(const Tensor& targets, std::int64_t vocab, std::int64_t ignore_index, const Tensor& row_max,
                         const Tensor& stats, const Tensor& lse, const Tensor& loss, const Tensor& count,
                         BadIndexRecord bad = {});
// dlogits = grad_loss / count * (exp(x - lse) - onehot(target - first)) on rows that count, 0 on the
// others; grad_loss and count are f32 device scalars. dlogits may be logits itself.
void vocab_part_backward(const Tensor& logits, const Tensor& targets, std::int64_t first, std::int64_t vocab,
                         std::int64_t ignore_index, const Tensor& lse, const Tensor& count, const Tensor& grad_loss,
                         const Tensor& dlogits);

}  // namespace bmt::kernels
