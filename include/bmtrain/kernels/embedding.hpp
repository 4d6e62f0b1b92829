#pragma once
// Embedding lookup and its gradient.
//
// ids: contiguous i32/i64 of any shape (N elements); weight: contiguous [V, C]; out: contiguous,
// N * C elements of weight's dtype. Rows of out whose id is outside [0, V) are zero, and the id is
// recorded for bmtrain/kernels/index_check.hpp.
#include <cstdint>
#include <memory>

#include "bmtrain/kernels/index_check.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels {

void embedding_forward(const Tensor& ids, const Tensor& weight, const Tensor& out, BadIndexRecord bad = {});

// ids - first (same shape and dtype, contiguous): the ids of a table's rows [first, first + V) as
// indices into a table holding only those rows; every other id falls outside [0, V), where the
// lookup gives a zero row and the gradient adds nothing.
Tensor ids_from(const Tensor& ids, std::int64_t first);

// The positions of each id in `ids`, made ahead of the backward so that it need not group them
// itself. On the CUDA build (contiguous ids) this queues a stable radix sort of (id, position) pairs
// and a table of each id's place in the sorted list (8 bytes a row of the table) on a side stream
// of higher priority than the compute stream: made at the forward, it runs beside
// the forward's kernels instead of before the backward's. Elsewhere it holds only the shape it was
// made for (the portable backward adds with atomics and needs no grouping). Read-only once made: any
// number of backward calls over the same ids may use it. It holds the ids while it exists, and
// dropping it never leaves the sort running on memory the compute stream may reuse.
class EmbeddingIndex {
 public:
  struct State;  // the backend's

  EmbeddingIndex() = default;
  EmbeddingIndex(std::int64_t tokens, std::int64_t V, std::shared_ptr<const State> state)
      : tokens_(tokens), V_(V), state_(std::move(state)) {}

  bool defined() const { return tokens_ >= 0; }
  std::int64_t tokens() const { return tokens_; }
  std::int64_t vocabulary() const { return V_; }
  // Null where the backend keeps nothing for the backward.
  const State* state() const { return state_.get(); }

 private:
  std::int64_t tokens_ = -1, V_ = 0;
  std::shared_ptr<const State> state_;
};

// The index of `ids` (any shape, i32/i64) for a table of V rows.
EmbeddingIndex embedding_index(const Tensor& ids, std::int64_t V);

// grad_weight = scatter-add of the rows of grad_out (N * C elements, any floating dtype) at ids;
// grad_weight is [V, C] of any floating dtype and is overwritten. Repeated ids add up, in f32.
// The CUDA build's kernel (contiguous inputs) sums each vocabulary row's contributions in token
// order, without atomics, so repeated runs give identical gradients; the portable kernel adds
// with f32 atomics (into grad_weight when it is f32, else into an f32 scratch cast once at the
// end). Out-of-range ids add nothing. `index`, when defined, must have been made from these ids
// and V; without it the CUDA kernel groups the ids itself, first.
void embedding_backward(const Tensor& ids, const Tensor& grad_out, const Tensor& grad_weight,
                        const EmbeddingIndex& index = {});

}  // namespace bmt::kernels
