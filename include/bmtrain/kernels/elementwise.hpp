#pragma once
// Raw elementwise kernels (no autograd): broadcasting binary arithmetic, activations and their
// derivatives. Inputs must be contiguous and of one floating dtype; outputs are new contiguous
// tensors of that dtype. Differentiable wrappers are in bmtrain/ops/elementwise.hpp.
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels {

enum class BinaryOp { add, sub, mul };
enum class Activation { gelu, silu, relu };

// NumPy broadcast of two shapes; throws naming both shapes when they do not broadcast.
Shape broadcast_shape(const Shape& a, const Shape& b, const char* op);

// "add", "sub" or "mul".
const char* binary_name(BinaryOp op);

// op(a, b) with broadcasting, into a new tensor of the broadcast shape.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
// The new tensor binary returns, checked and allocated but not written.
Tensor binary_output(BinaryOp op, const Tensor& a, const Tensor& b);
// op(a, b) into `out`, a contiguous tensor of binary_output's shape and dtype.
void binary_into(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
// out = residual + x + bias, each element rounded once: a residual connection that also adds the
// bias of the projection x came from. residual, x and out contiguous, of one shape and floating
// dtype; bias [C] of that dtype (C = the last dimension), or undefined.
void residual_add_into(const Tensor& residual, const Tensor& x, const Tensor& bias, const Tensor& out);
// alpha * x + beta.
Tensor affine(const Tensor& x, float alpha, float beta);

Tensor activation_forward(Activation act, const Tensor& x);
// grad * act'(x).
Tensor activation_backward(Activation act, const Tensor& x, const Tensor& grad);

Tensor swiglu_forward(const Tensor& gate, const Tensor& up);
// d_gate = grad * up * silu'(gate), d_up = grad * silu(gate); either pointer may be null.
void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& grad, Tensor* d_gate, Tensor* d_up);

}  // namespace bmt::kernels
