#pragma once
// Rotary position embedding (RoPE), Llama's "rotate_half" convention: with h = D / 2, the pairs
// (x[i], x[i + h]) of each head vector are rotated by the angle pos * theta^(-2i / D):
//   y[i]     = x[i] * cos - x[i + h] * sin
//   y[i + h] = x[i + h] * cos + x[i] * sin
// Angles are computed in f32 (as Llama's reference code does), once per (batch, position) and reused
// across heads. `inverse` rotates by the negative angle: the backward of the forward rotation.
#include <cstdint>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels {

// x: 4-dimensional, [B, T, H, D] when seq_dim == 1 or [B, H, T, D] when seq_dim == 2, any strides;
// D even. y: contiguous, x's shape and dtype. positions: undefined (position of t is offset + t),
// or contiguous i32/i64 of shape [T] (shared by the batch) or [B, T].
void rotary_apply(const Tensor& x, const Tensor& positions, std::int64_t offset, float theta, int seq_dim,
                  bool inverse, const Tensor& y);

}  // namespace bmt::kernels
