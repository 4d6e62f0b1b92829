#pragma once
// Differentiable elementwise ops.
//
// Binary ops broadcast by NumPy rules: shapes are aligned at the last dimension, and a dimension of
// size 1 (or a missing leading one) stretches to the other operand's size. The common cases run on
// fast paths: same shape, and one operand equal to the other's trailing dimensions (a bias [N] over
// [..., N], a [T, N] table over [B, T, N]); anything else broadcastable takes a strided path. The
// gradient of a broadcast operand is summed over the stretched dimensions. Both operands must have
// the same floating dtype (f32, bf16 or f16); the result has that dtype.
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);

Tensor scale(const Tensor& x, float alpha);       // alpha * x
Tensor add_scalar(const Tensor& x, float value);  // x + value

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as in GPT-2.
Tensor gelu(const Tensor& x);
Tensor silu(const Tensor& x);  // x * sigmoid(x)
Tensor relu(const Tensor& x);  // gradient 0 at x = 0
// silu(gate) * up, the Llama MLP's gated activation, in one kernel each way.
Tensor swiglu(const Tensor& gate, const Tensor& up);

// residual + x + bias (bias [C] over the last dimension, or Tensor()) in one pass: a residual
// connection with the bias of the projection x came from, which then runs without its bias
// epilogue (that epilogue costs a GEMM more than this pass does). residual and x have one shape and
// floating dtype, the bias that dtype.
Tensor residual_add(const Tensor& residual, const Tensor& x, const Tensor& bias = Tensor());

}  // namespace bmt
