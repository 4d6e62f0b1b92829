#pragma once
// Softmax cross-entropy fused with its softmax: forward keeps one logsumexp per row, backward
// recomputes softmax(x) - onehot(target) from it row by row, so the probabilities are never stored.
//
// logits: contiguous [N, V] (any leading shape flattened to N rows), f32, bf16 or f16.
// targets: contiguous, N elements, i32 or i64. Rows whose target equals ignore_index are left out.
// lse: f32 [N]. loss, count: f32 scalars (any shape of one element): the mean loss over the rows
// that count, and how many rows count. With no row counting, loss is 0 (and so are the gradients).
// Targets outside [0, V) other than ignore_index are treated like ignored rows and reported through
// bmtrain/kernels/index_check.hpp.
#include <cstdint>

#include "bmtrain/kernels/index_check.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels {

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index, const Tensor& lse,
                           const Tensor& loss, const Tensor& count, BadIndexRecord bad = {});
// dlogits = grad_loss / count * (softmax(logits) - onehot(target)) on counted rows, 0 on the others.
// grad_loss and count are device scalars (f32), read by the kernel: no host synchronization.
// dlogits may be logits itself (the gradient then overwrites them).
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                            const Tensor& lse, const Tensor& count, const Tensor& grad_loss, const Tensor& dlogits);

// count = how many targets lie in [0, vocab) and are not ignore_index (an f32 scalar): the count
// cross_entropy_forward, or cross_entropy_combine over chunks, arrives at, known before any logits.
void count_targets(const Tensor& targets, std::int64_t vocab, std::int64_t ignore_index, const Tensor& count);

// out = grad_loss * grad, or out += that with accumulate: a gradient made for an upstream gradient
// of 1 (ahead of backward) scaled by the loss's own once backward brings it. grad: contiguous f32;
// out: contiguous, f32, bf16 or f16, grad's element count; grad_loss: an f32 device scalar.
void scale_by_grad_loss(const Tensor& grad, const Tensor& grad_loss, const Tensor& out, bool accumulate);

// The loss over rows taken in chunks: parts is f32 [chunks, 2], each row a chunk's (mean loss,
// count) as cross_entropy_forward wrote them; loss = sum(mean * count) / sum(count) (0 when no row
// counts), count = sum(count), folded on the device in chunk order.
void cross_entropy_combine(const Tensor& parts, const Tensor& loss, const Tensor& count);

}  // namespace bmt::kernels
