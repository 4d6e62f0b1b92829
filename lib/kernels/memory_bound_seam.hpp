#pragma once
// The kernel seam of the memory-bound kernels (docs/ARCHITECTURE.md, "Backend seams"). The portable
// Kokkos kernels (norm.cpp, softmax.cpp, cross_entropy.cpp, elementwise.cpp, embedding.cpp,
// basic.cpp, reduce.cpp) first offer each call to the backend: on the CUDA build raw CUDA kernels
// (the *_cuda.cpp files beside this one: vectorized 16-byte loads, f32 accumulation, warp-shuffle
// reductions) take the contiguous f32/bf16/f16 cases; on the host build memory_bound_host.cpp
// declines every call. A function returns true when it queued the work on the compute stream, false
// when the caller must run its portable kernel (host build, runtime not initialized, a layout or
// size the CUDA kernel does not take).
//
// The callers have already checked shapes and dtypes; these functions only decide whether they can
// take the call, so both paths accept and refuse exactly the same arguments.
#include <cstdint>
#include <memory>

#include "bmtrain/kernels/elementwise.hpp"
#include "bmtrain/kernels/embedding.hpp"
#include "bmtrain/kernels/index_check.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels::seam {

// LayerNorm (centered, mean defined) and RMSNorm (mean undefined). weight/bias may be undefined.
bool norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd);
// Any of dx, dweight, dbias may be undefined (not wanted); accumulate and add_into_dx as in
// kernels/norm.hpp.
bool norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                   const Tensor& dx, const Tensor& dweight, const Tensor& dbias, bool accumulate, bool add_into_dx);

bool softmax_forward(const Tensor& x, const Tensor& y);
bool softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx);

bool cross_entropy_forward(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index, const Tensor& lse,
                           const Tensor& loss, const Tensor& count, BadIndexRecord bad);
bool cross_entropy_backward(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                            const Tensor& lse, const Tensor& count, const Tensor& grad_loss, const Tensor& dlogits);

// Elementwise: every tensor contiguous and of the same shape (no broadcasting) and dtype.
bool binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b);
bool affine(const Tensor& out, const Tensor& x, float alpha, float beta);
// out = residual + x + bias; bias [C] over the last dimension, or undefined.
bool residual_add(const Tensor& out, const Tensor& residual, const Tensor& x, const Tensor& bias);
bool activation_forward(Activation act, const Tensor& out, const Tensor& x);
bool activation_backward(Activation act, const Tensor& out, const Tensor& x, const Tensor& grad);
bool swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up);
// d_gate / d_up may be undefined (not wanted).
bool swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& grad, const Tensor& d_gate,
                     const Tensor& d_up);

// basic.hpp's building blocks on contiguous floating tensors: t = value; dst = alpha * src
// (+ dst when accumulating), any floating dtypes, same element count.
bool fill(const Tensor& t, float value);
bool copy(const Tensor& dst, const Tensor& src, float alpha, bool accumulate);

// *result (device memory) = the sum of the squares of `count` contiguous tensors of one floating
// dtype: tensor k at data[k] holds end[k] - end[k - 1] elements (end[-1] = 0). f64 sums in a fixed
// order, so the result is the same on every run and does not depend on how the elements are split.
bool sum_squares(DType dtype, const void* const* data, const std::int64_t* end, int count, double* result);

// out[c] = (accumulate: out[c] +) the sum of x[r][c] over the rows of x [rows, cols]; out is f32
// or x's dtype. Partials in a fixed order, so the result is the same on every run.
bool column_sums(const Tensor& x, const Tensor& out, bool accumulate);

bool embedding_forward(const Tensor& ids, const Tensor& weight, const Tensor& out, BadIndexRecord bad);
// The backend's part of an EmbeddingIndex; null where the backward takes none.
std::shared_ptr<const EmbeddingIndex::State> embedding_index(const Tensor& ids, std::int64_t V);
// Deterministic: each row of grad_weight is summed in token order, with no atomics. `index` may be
// null (the backward then makes one).
bool embedding_backward(const Tensor& ids, const Tensor& grad_out, const Tensor& grad_weight,
                        const EmbeddingIndex::State* index);

}  // namespace bmt::kernels::seam
