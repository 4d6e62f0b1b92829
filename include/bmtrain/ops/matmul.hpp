#pragma once
// Differentiable matrix products over the GEMM seam (OpenBLAS on the host build, cuBLASLt on CUDA).
// Arithmetic is f32 for every dtype; the result has the inputs' dtype.
//
// Operands are used in place when their last two dimensions are row-major or column-major with
// unit stride (a transposed view such as w.transpose(0, 1) of a contiguous matrix is read through a
// BLAS transpose flag, not copied); other layouts are copied to contiguous memory first.
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

// a [..., M, K] x b [K, N] -> [..., M, N]: the leading dimensions of a are flattened into M.
// a [B..., M, K] x b [B..., K, N] with the same leading dimensions -> [B..., M, N]: one product
// per leading index (batched GEMM); leading dimensions are not broadcast.
// a 1-D is not accepted: give it a leading dimension of 1.
Tensor matmul(const Tensor& a, const Tensor& b);

// y = x W^T + b, PyTorch's convention: x [..., in], weight [out, in], bias [out] or an undefined
// Tensor() for none. On CUDA the bias is fused into the GEMM (cuBLASLt bias epilogue).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// linear(gelu(x), weight, bias) (GELU's tanh form, as bmt::gelu) as one op: its backward computes
// the gradient of x in the GEMM that produces the gradient of gelu(x) (on CUDA, cuBLASLt's DGELU
// epilogue), with no pass of its own over that [..., in] tensor. The derivative is applied to the
// f32 product before rounding, so in bf16/f16 the gradient differs from gelu then linear's (which
// rounds the product first) by about one rounding.
Tensor gelu_linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// gelu(linear(x, weight, bias)) as one op, the GELU applied in the GEMM to its unrounded output
// instead of in a pass over the rounded product (GemmParams::gelu_output has the details): in
// bf16/f16 on CUDA with rows of whole 16-byte units, cuBLASLt's GELU epilogue, within a few
// roundings of the dtype of the exact value (linear then gelu: within about two); otherwise on
// CUDA (f32, other rows) a pass after the GEMM, the same values as linear then gelu. When a
// gradient is recorded the GEMM also writes the GELU's input, rounded, at which backward takes the
// derivative (and runs at the call even under OutputsOnDemandGuard). Where no gradient is recorded
// (a recomputed block's first pass, evaluation) and the output feeds a GEMM, this saves the GELU
// pass over the [..., out] tensor that linear then gelu_linear makes (bench_kernels'
// LinearGeluForward).
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace bmt
