#pragma once
// A language model's head and loss in one op: cross_entropy(linear(h, weight), targets) without
// the [rows, vocab] logits.
//
//   Tensor loss = bmt::linear_cross_entropy(h, weight, targets, 2048);  // h [..., C], weight [V, C]
//
// The rows go through in chunks of chunk_rows: a chunk's logits are made (one GEMM) and reduced to
// its rows' logsumexp and loss. When a backward may follow (grad mode on, h or weight requiring a
// gradient), the same chunk's logits then become their gradient in place and go into the chunk's
// rows of dh and its part of dweight (two GEMMs, both f32), before the next chunk's overwrite them;
// backward only scales dh and dweight by the loss's upstream gradient and rounds them to the
// dtype. Memory for the logits is one chunk's, chunk_rows x V, instead of rows x V (at GPT-2's
// vocabulary and 16 x 1024 tokens, 206 MB at 2048 rows instead of 1.65 GB); the gradients are held
// in f32 from the forward to the backward, and h and weight are not held for backward. In f16 the
// gradients are made in backward instead, from each chunk's logits made again (the head's GEMM once
// more), so that the logits' gradient carries the loss scale before it is rounded.
//
// h and weight: one floating dtype, h [..., C], weight [V, C]; targets: i32 or i64, as many as h has
// rows (h's leading shape, or flat). The loss is cross_entropy's (an f32 scalar: the mean over rows
// whose target is not ignore_index; 0, with zero gradients, when every target is ignored), the
// same value up to the order of the f32 sums. chunk_rows must be positive; one chunk holding every
// row does the same work as linear then cross_entropy.
#include <cstdint>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

Tensor linear_cross_entropy(const Tensor& h, const Tensor& weight, const Tensor& targets, std::int64_t chunk_rows,
                            std::int64_t ignore_index = -100);

}  // namespace bmt
