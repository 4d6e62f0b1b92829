#pragma once
// The GEMM seam: lib/kernels/gemm_host.cpp (OpenBLAS) or lib/kernels/gemm_cuda.cpp (cuBLASLt) is
// compiled, never both. Row-major throughout, like the rest of the library:
//
//   C[i] = alpha * op(A[i]) op(B[i]) + beta * C[i] (+ bias on every row),  i < batch
//
// optionally with a GELU, or its derivative, applied on the way out (below).
//
// with op(A) of shape [m, k], op(B) [k, n], C [m, n]. An operand with trans set is stored as its
// transpose ([k, m] for A), which is how a transposed view is read without a copy. A, B, C and bias
// share one dtype (f32, bf16 or f16); products and sums are f32, but on CUDA cuBLASLt's bias
// epilogue rounds a bf16/f16 product to the dtype before adding the bias for some problems (seen
// at 5-wide rows), so a biased 16-bit C is within two roundings. With f32_output, C is f32 while A
// and B are bf16/f16 (a weight gradient added straight into an f32 gradient buffer). The work is
// queued on the compute stream.
#include <cstdint>

#include "bmtrain/runtime/dtype.hpp"

namespace bmt::kernels {

struct GemmOperand {
  const void* data = nullptr;
  std::int64_t ld = 0;            // elements between consecutive stored rows
  bool trans = false;             // stored transposed
  std::int64_t batch_stride = 0;  // elements between consecutive matrices of a batch
};

struct GemmParams {
  DType dtype = DType::f32;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t batch = 1;
  GemmOperand a, b;
  void* c = nullptr;
  std::int64_t ldc = 0;
  std::int64_t c_batch_stride = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  const void* bias = nullptr;  // [n] or null; only with batch == 1
  bool f32_output = false;     // C in f32 (no bias), A and B in dtype
  // GELU's backward on the way out: C = (alpha op(A) op(B)) * gelu'(X) elementwise, before C is
  // rounded, where X (dtype, laid out like C with leading dimension ldc) is the GELU's input.
  // Only with batch == 1, beta == 0, no bias and no f32_output (cuBLASLt's DGELU epilogue).
  // Where cuBLASLt has no DGELU kernel for the problem, the derivative is applied in a pass after
  // the GEMM, to the product rounded to dtype (then C's rows must be contiguous: ldc == n).
  const void* gelu_input = nullptr;
  // GELU on the way out: C = gelu(alpha op(A) op(B) + bias); with gelu_pre, the GELU's input
  // rounded to dtype (what its backward needs) is written there too, laid out like C. Only with
  // batch == 1, beta == 0, no f32_output and no gelu_input. On CUDA in bf16/f16, where C's rows
  // are whole 16-byte units and 16-byte aligned, the GELU is cuBLASLt's epilogue (GELU, GELU_BIAS,
  // GELU_AUX, GELU_AUX_BIAS) on the f32 value, less exact than bmt::gelu (within a few roundings of
  // the output; the kernels with and without gelu_pre may differ by as much). Otherwise (f32, other
  // rows, or no such kernel for the problem) the product is rounded to dtype and the GELU follows
  // in bmt::gelu's pass (then C's rows must be contiguous: ldc == n). The host build applies
  // bmt::gelu's formula to the f32 value before rounding.
  bool gelu_output = false;
  void* gelu_pre = nullptr;
};

void gemm(const GemmParams& p);

// An FP8 matrix product: C = a_scale * b_scale * A B^T (+ C with accumulate) (+ bias on every
// row), with A [m, k] and
// B [n, k] row-major float8 (f8e4m3 or f8e5m2, not both f8e5m2) whose rows of k are contiguous,
// as cuBLASLt requires of FP8 operands on Hopper ("TN"), a_scale and b_scale f32 scalars in
// device memory (what a code is multiplied by to give the value it stands for), and C [m, n]
// (leading dimension ldc) in bf16, f16 or f32, the bias [n] in C's dtype (bf16/f16 only). The
// products of two float8 values are exact in f32 and the sums are f32, then C is rounded once (on
// CUDA, as for gemm(), cuBLASLt's bias epilogue may round the product to C's dtype before adding
// the bias). On CUDA, cuBLASLt's FP8 matmul; where it has no
// kernel for the problem (k not a multiple of 16, unaligned rows), and on the host build, the
// codes are widened exactly to f32 and multiplied by gemm(), the scales applied to the f32 sums.
struct Float8GemmParams {
  std::int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  DType a_dtype = DType::f8e4m3;
  const float* a_scale = nullptr;
  const void* b = nullptr;
  DType b_dtype = DType::f8e4m3;
  const float* b_scale = nullptr;
  void* c = nullptr;
  DType c_dtype = DType::bf16;
  std::int64_t ldc = 0;
  bool accumulate = false;
  const void* bias = nullptr;
  // On FP8 tensor cores, keep the whole sum in the tensor cores' accumulator (about 14 bits of
  // mantissa) instead of moving it to f32 every few steps of k: faster, and less accurate by up to
  // k additions of that precision (cuBLASLt's FAST_ACCUM; torchao and Transformer Engine use it for
  // the forward product). The products through f32 (the host's, and CUDA's fallback) are the same
  // either way.
  bool fast_accumulation = false;
};

void gemm_float8(const Float8GemmParams& p);

// Whether gemm_float8(p) runs on FP8 tensor cores (cuBLASLt has a kernel for the problem) rather
// than through f32. Always false on the host build.
bool gemm_float8_on_tensor_cores(const Float8GemmParams& p);

// Whether p's GELU (gelu_output) or GELU derivative (gelu_input) runs inside the GEMM, on the
// unrounded product, rather than in a pass after it. Always true on the host build; on CUDA, the
// GELU is not fused for f32 or for rows of C that are not whole, aligned 16-byte units, and either
// is not where cuBLASLt has no epilogue kernel for the problem.
bool gemm_fuses_gelu(const GemmParams& p);

// Whether GEMMs pick their kernels by timing cuBLASLt's candidates (BMT_GEMM_AUTOTUNE=1 on a CUDA
// build; docs/CUDA.md) rather than taking its heuristic's first. Always false on the host build.
bool gemm_autotune();

}  // namespace bmt::kernels
