#pragma once
// Tensors read as batches of row-major matrices for the GEMM seam, without copies where their
// strides allow: what matmul, linear and linear_cross_entropy multiply with.
#include <cstdint>
#include <utility>

#include "bmtrain/kernels/gemm.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

// A tensor read as a batch of matrices: its last two dimensions [rows, cols], the leading ones
// flattened into the batch. `tensor` keeps the memory alive (a copy when the layout needed one).
struct MatrixBatch {
  Tensor tensor;
  kernels::GemmOperand op;
  std::int64_t batch = 1, rows = 0, cols = 0;

  MatrixBatch transposed() const {
    MatrixBatch t = *this;
    t.op.trans = !op.trans;
    std::swap(t.rows, t.cols);
    return t;
  }
};

// Reads t [B..., rows, cols] in place when each matrix has unit stride along one of its
// dimensions and the leading dimensions step uniformly; copies it to contiguous memory otherwise.
MatrixBatch as_matrices(const Tensor& t);

// out (contiguous [batch, m, n]) = op(A) op(B) (+ bias) (+ out when accumulating).
// `operands` is A's and B's dtype when it differs from out's (an f32 `out` being accumulated into).
// With gelu_input (laid out like out), the product is multiplied by gelu' of it (GemmParams).
void multiply(const MatrixBatch& a, const MatrixBatch& b, const Tensor& out, const void* bias = nullptr,
              bool accumulate = false, DType operands = DType::f32, const void* gelu_input = nullptr);

// out (contiguous [m, n]) = gelu(op(A) op(B) + bias), the GELU on the f32 value; that value
// rounded to out's dtype is written to pre (laid out like out) when pre is given (GemmParams).
void multiply_gelu(const MatrixBatch& a, const MatrixBatch& b, const Tensor& out, const void* bias, void* pre);
// A new [shape] tensor of dtype holding op(A) op(B) (0 for an empty sum).
Tensor product(const MatrixBatch& a, const MatrixBatch& b, const Shape& shape, DType dtype,
               const void* gelu_input = nullptr);

// a [..., K] as a matrix [M, K] (M = product of the leading dimensions).
MatrixBatch as_rows(const Tensor& a);

}  // namespace bmt
