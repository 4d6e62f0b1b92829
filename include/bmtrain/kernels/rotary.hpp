#pragma once
// Rotary position embedding (RoPE), Llama's "rotate_half" convention (the one Hugging Face's
// Llama uses, for which its checkpoints' q/k projections are laid out): with h = D / 2, the pairs
// (x[i], x[i + h]) of each head vector are rotated by the angle pos * f_i, with the frequency
// f_i = 1 / theta^(2i / D):
//   y[i]     = x[i] * cos - x[i + h] * sin
//   y[i + h] = x[i + h] * cos + x[i] * sin
// Angles are computed in f32 (as Llama's reference code and transformers do), once per (batch,
// position) and reused across heads. `inverse` rotates by the negative angle: the backward of the
// forward rotation.
#include <cstdint>

#include "bmtrain/kernels/math.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels {

// The frequencies f_i. With factor > 0, Llama 3's scaling of them (Hugging Face's rope_scaling
// with rope_type "llama3"): with wavelength w = 2 pi / f, L = original_max_positions,
// frequencies of w > L / low_freq_factor are divided by factor, those of w < L / high_freq_factor
// kept, and those between blended: (1 - s) f / factor + s f with
// s = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor).
struct RotaryFrequencies {
  float theta = 10000.0f;
  float factor = 0.0f;  // 0: no scaling
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  float original_max_positions = 8192.0f;

  // f_i for head dimension d, in f32 as transformers computes it.
  KOKKOS_INLINE_FUNCTION float frequency(std::int64_t i, std::int64_t d) const {
    const float f = 1.0f / kmath::pow(theta, static_cast<float>(2 * i) / static_cast<float>(d));
    if (!(factor > 0.0f)) return f;
    const float wavelength = 6.283185307179586f / f;
    if (wavelength > original_max_positions / low_freq_factor) return f / factor;
    if (wavelength < original_max_positions / high_freq_factor) return f;
    const float s = (original_max_positions / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
    return (1.0f - s) * f / factor + s * f;
  }
};

// x: 4-dimensional, [B, T, H, D] when seq_dim == 1 or [B, H, T, D] when seq_dim == 2, any strides;
// D even. y: contiguous, x's shape and dtype. positions: undefined (position of t is offset + t),
// or contiguous i32/i64 of shape [T] (shared by the batch) or [B, T].
void rotary_apply(const Tensor& x, const Tensor& positions, std::int64_t offset, const RotaryFrequencies& frequencies,
                  int seq_dim, bool inverse, const Tensor& y);

}  // namespace bmt::kernels
