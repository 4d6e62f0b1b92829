#pragma once
// Float8 with per-tensor current scaling: the operands of FP8 matrix products. A tensor x becomes
// codes q = round_to_format(x * scale), scale = format_max / amax, amax = max |x| of the tensor
// itself, so its largest magnitude lands on the format's largest value and the rest keep as much
// of the format's range as the tensor's spread allows; a GEMM reads code * (1 / scale). The
// rounding is float8.hpp's (nearest even, saturating), the same on every backend, so the host
// build computes the values the GPU does.
//
// Everything is queued on the compute stream and the scales stay on the device: nothing waits.
#include <cfloat>
#include <cstdint>

#include <Kokkos_Core.hpp>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels {

// The scale that takes a tensor of largest magnitude amax onto a format of largest value
// format_max: format_max / amax, 1 where amax is 0 (nothing to scale), and at most FLT_MAX where a
// tiny amax would overflow it. An infinite amax (a tensor holding inf or NaN) gives 0, so the
// tensor's codes and its products are not finite, and the step that made them is skipped like any
// other non-finite step.
KOKKOS_INLINE_FUNCTION float float8_scale(float amax, float format_max) {
  if (amax == 0.0f) return 1.0f;
  const float s = format_max / amax;
  return s > FLT_MAX ? FLT_MAX : s;
}

// A matrix in float8 with one scale: element (r, c) stands for code(r, c) * scale_inv.
struct Float8Matrix {
  Tensor codes;       // [rows, cols] in f8e4m3 or f8e5m2, or undefined when not asked for
  Tensor transposed;  // [cols, rows]: the same codes transposed, or undefined when not asked for
  Tensor scale_inv;   // f32 [] on the device: 1 / scale
};

// max |x| over x (f32/bf16/f16, contiguous) as an f32 [] tensor on the device; NaN counts as
// infinite. 0 for an empty x.
Tensor abs_max(const Tensor& x);

// x (f32/bf16/f16, contiguous, read as [numel / cols, cols]) scaled by float8_scale(amax) and
// rounded to format (f8e4m3 or f8e5m2). amax is an f32 [] device tensor: abs_max(x), or an amax
// agreed over several tensors (a ZeRO group's shards). row_major and transposed say which layouts
// to write (at least one); both come from one pass over x.
Float8Matrix quantize_float8(const Tensor& x, std::int64_t cols, const Tensor& amax, DType format,
                             bool row_major = true, bool transposed = false);

// codes [rows, cols] (float8, contiguous) transposed into a new [cols, rows] tensor of the same
// codes: the layout the other operand of a product reads, made from codes quantized once.
Tensor transpose_float8(const Tensor& codes);

// What quantized values stand for: codes * scale_inv (an f32 [] device tensor) in dtype
// (f32/bf16/f16), with codes' shape.
Tensor dequantize_float8(const Tensor& codes, const Tensor& scale_inv, DType dtype);

// dst = src elementwise where one of them is float8 and the other floating, unscaled (bmt::cast):
// to float8 rounding and saturating as float8.hpp does, from float8 exactly (then rounded to dst's
// dtype). Both contiguous and of one shape.
void convert_float8(const Tensor& dst, const Tensor& src);

}  // namespace bmt::kernels
