#pragma once
// A language model's head and loss in one op: cross_entropy(linear(h, weight), targets) without
// the [rows, vocab] logits.
//
//   Tensor loss = bmt::linear_cross_entropy(h, weight, targets, 2048);  // h [..., C], weight [V, C]
//
// The rows go through in chunks of chunk_rows: a chunk's logits are made (one GEMM), reduced to
// its rows' logsumexp and loss, and dropped; backward makes each chunk's logits again, overwrites
// them with their gradient and turns that into the chunk's rows of dh and its part of dweight (two
// GEMMs, dweight summed in f32). Memory for the logits is one chunk's, chunk_rows x V, instead of
// rows x V (at GPT-2's vocabulary and 16 x 1024 tokens, 206 MB at 2048 rows instead of 1.65 GB);
// the price is the head's forward GEMM once more in backward.
//
// h and weight: one floating dtype, h [..., C], weight [V, C]; targets: i32 or i64, as many as h has
// rows (h's leading shape, or flat). The loss is cross_entropy's (an f32 scalar: the mean over rows
// whose target is not ignore_index; 0, with zero gradients, when every target is ignored), the
// same value up to the order of the f32 sums. chunk_rows must be positive; one chunk holding every
// row does the same work as linear then cross_entropy, plus the extra GEMM.
#include <cstdint>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

Tensor linear_cross_entropy(const Tensor& h, const Tensor& weight, const Tensor& targets, std::int64_t chunk_rows,
                            std::int64_t ignore_index = -100);

}  // namespace bmt
