#pragma once
// Differentiable rotary position embedding (RoPE), Llama's "rotate_half" convention (Hugging Face's
// Llama too): the pairs (x[i], x[i + D/2]) of every head vector are rotated by pos / theta^(2i/D),
// or with Llama 3's frequency scaling (RotaryFrequencies, bmtrain/kernels/rotary.hpp). Backward
// rotates the gradient back (the inverse rotation); nothing is saved but the positions.
//
//   Tensor q = bmt::rotary_embedding(q_bthd);              // positions 0, 1, ..., T-1
//   Tensor q = bmt::rotary_embedding(q_bthd, past_len);    // positions past_len + t
//   Tensor q = bmt::rotary_embedding(q_bthd, pos_ids);     // explicit positions, [T] or [B, T]
//   Tensor q = bmt::rotary_embedding(q_bthd, 0, {500000.0f, 32.0f, 1.0f, 4.0f, 8192.0f});  // Llama 3.2
//
// Layout: [B, T, H, D] by default, the shape a fused QKV projection has before heads move in front
// of positions, so RoPE applies before that transpose; [B, H, T, D] with RotaryLayout::BHTD. The
// input may have any strides (a slice of a fused QKV projection works without a copy); the output
// is contiguous in the input's shape and dtype. D must be even; angles are computed in f32.
#include <cstdint>

#include "bmtrain/kernels/rotary.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

enum class RotaryLayout { BTHD, BHTD };
using kernels::RotaryFrequencies;

Tensor rotary_embedding(const Tensor& x, std::int64_t offset, const RotaryFrequencies& frequencies,
                        RotaryLayout layout = RotaryLayout::BTHD);
Tensor rotary_embedding(const Tensor& x, const Tensor& positions, const RotaryFrequencies& frequencies,
                        RotaryLayout layout = RotaryLayout::BTHD);
// The same with unscaled frequencies of base theta.
Tensor rotary_embedding(const Tensor& x, std::int64_t offset = 0, float theta = 10000.0f,
                        RotaryLayout layout = RotaryLayout::BTHD);
// positions: i32/i64, [T] or [B, T].
Tensor rotary_embedding(const Tensor& x, const Tensor& positions, float theta = 10000.0f,
                        RotaryLayout layout = RotaryLayout::BTHD);

}  // namespace bmt
