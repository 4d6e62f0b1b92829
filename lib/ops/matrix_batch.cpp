#include "matrix_batch.hpp"

#include <algorithm>

#include "bmtrain/kernels/basic.hpp"

namespace bmt {

MatrixBatch as_matrices(const Tensor& t) {
  const std::int64_t nd = t.dim();
  MatrixBatch m;
  m.rows = t.size(-2);
  m.cols = t.size(-1);
  for (std::int64_t d = 0; d + 2 < nd; ++d) m.batch *= t.shape()[d];
  const Shape& st = t.strides();
  const std::int64_t r = m.rows, c = m.cols, sr = st[nd - 2], sc = st[nd - 1];
  // The stride of a size-1 dimension carries no meaning, so it never rules a layout out.
  const bool row_major = (c == 1 || sc == 1) && (r == 1 || sr >= c);
  const bool col_major = (r == 1 || sr == 1) && (c == 1 || sc >= r);  // a transposed view
  bool direct = row_major || col_major;
  if (row_major)
    m.op = {t.data(), r == 1 ? std::max<std::int64_t>(c, 1) : std::max<std::int64_t>(sr, 1), false, 0};
  else if (col_major)
    m.op = {t.data(), c == 1 ? std::max<std::int64_t>(r, 1) : std::max<std::int64_t>(sc, 1), true, 0};
  // The batch dimensions must collapse into one stride.
  std::int64_t batch_stride = r * c, expected = -1;  // expected: the next outer dimension's stride
  for (std::int64_t d = nd - 3; direct && d >= 0; --d) {
    if (t.shape()[d] == 1) continue;
    if (expected < 0) batch_stride = st[d];
    else direct = st[d] == expected;
    expected = st[d] * t.shape()[d];
  }
  if (!direct) {
    const Tensor packed = contiguous(t);
    m.tensor = packed;
    m.op = {packed.data(), std::max<std::int64_t>(c, 1), false, r * c};
    return m;
  }
  m.tensor = t;
  m.op.batch_stride = batch_stride;
  return m;
}

namespace {

// The GEMM of out = op(A) op(B), out contiguous, with no epilogue.
kernels::GemmParams gemm_params(const MatrixBatch& a, const MatrixBatch& b, const Tensor& out) {
  kernels::GemmParams p;
  p.dtype = out.dtype();
  p.m = a.rows;
  p.n = b.cols;
  p.k = a.cols;
  p.batch = a.batch;
  p.a = a.op;
  p.b = b.op;
  p.c = out.data();
  p.ldc = p.n;
  p.c_batch_stride = p.m * p.n;
  return p;
}

}  // namespace

void multiply(const MatrixBatch& a, const MatrixBatch& b, const Tensor& out, const void* bias,
              bool accumulate, DType operands, const void* gelu_input) {
  kernels::GemmParams p = gemm_params(a, b, out);
  if (out.dtype() == DType::f32 && operands != DType::f32) {
    p.dtype = operands;
    p.f32_output = true;
  }
  p.bias = bias;
  p.beta = accumulate ? 1.0f : 0.0f;
  p.gelu_input = gelu_input;
  kernels::gemm(p);
}

void multiply_gelu(const MatrixBatch& a, const MatrixBatch& b, const Tensor& out, const void* bias, void* pre) {
  kernels::GemmParams p = gemm_params(a, b, out);
  p.bias = bias;
  p.gelu_output = true;
  p.gelu_pre = pre;
  kernels::gemm(p);
}

Tensor product(const MatrixBatch& a, const MatrixBatch& b, const Shape& shape, DType dtype,
               const void* gelu_input) {
  Tensor out = Tensor::empty(shape, dtype);
  if (out.numel() == 0) return out;
  if (a.cols == 0) {  // an empty sum
    out.zero_();
    return out;
  }
  multiply(a, b, out, nullptr, false, DType::f32, gelu_input);
  return out;
}

MatrixBatch as_rows(const Tensor& a) {
  if (a.dim() == 2) return as_matrices(a);
  const std::int64_t k = a.size(-1);
  std::int64_t rows = 1;
  for (std::int64_t d = 0; d + 1 < a.dim(); ++d) rows *= a.shape()[d];
  return as_matrices(contiguous(a).view({rows, k}));
}

}  // namespace bmt
