#pragma once
// The arithmetic of the elementwise kernels, shared by the portable Kokkos kernels
// (elementwise.cpp) and the CUDA ones (elementwise_cuda.cpp) so both compute the same values.
// Everything is in float; callers load and store the storage type.
#include "bmtrain/kernels/common.hpp"
#include "bmtrain/kernels/math.hpp"

namespace bmt::kernels::ewise {

struct AddOp {
  KOKKOS_INLINE_FUNCTION float operator()(float a, float b) const { return a + b; }
};
struct SubOp {
  KOKKOS_INLINE_FUNCTION float operator()(float a, float b) const { return a - b; }
};
struct MulOp {
  KOKKOS_INLINE_FUNCTION float operator()(float a, float b) const { return a * b; }
};

// tanh(u) and its derivative 1 - tanh(u)^2 from one exp: with e = exp(2u), r = 1/(e+1) and
// s = e/(e+1), tanh = s - r and 1 - tanh^2 = 4rs. In GELU on the host this is faster than tanhf
// (bench_kernels' Gelu on the CPU build), and it stays finite for every u (e = inf gives r = 0,
// s = 1).
struct TanhParts {
  float tanh, sech2;
};
KOKKOS_INLINE_FUNCTION TanhParts tanh_parts(float u) {
#if defined(__CUDA_ARCH__)
  // On the GPU the IEEE exp and division made GELU compute-bound at half the copy bandwidth; the
  // hardware exp2 and reciprocal are within a few ulp (1/inf is still 0).
  const float e = __expf(2.0f * u);
  const float r = __fdividef(1.0f, e + 1.0f);
#else
  const float e = kmath::exp(2.0f * u);
  const float r = 1.0f / (e + 1.0f);
#endif
  const float s = e < 1.0f ? e * r : 1.0f - r;  // whichever form keeps its precision
  return {s - r, 4.0f * r * s};
}

// Activations: value and derivative (times the incoming gradient) at x.
struct Gelu {
  KOKKOS_INLINE_FUNCTION float forward(float x) const {
    const float k = 0.7978845608028654f, c = 0.044715f;  // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanh_parts(k * (x + c * x * x * x)).tanh);
  }
  KOKKOS_INLINE_FUNCTION float backward(float x, float g) const {
    const float k = 0.7978845608028654f, c = 0.044715f;
    const TanhParts t = tanh_parts(k * (x + c * x * x * x));
    const float du = k * (1.0f + 3.0f * c * x * x);
    return g * (0.5f * (1.0f + t.tanh) + 0.5f * x * t.sech2 * du);
  }
};
struct Silu {
  KOKKOS_INLINE_FUNCTION static float sigmoid(float x) { return 1.0f / (1.0f + kmath::exp(-x)); }
  KOKKOS_INLINE_FUNCTION float forward(float x) const { return x * sigmoid(x); }
  KOKKOS_INLINE_FUNCTION float backward(float x, float g) const {
    const float s = sigmoid(x);
    return g * s * (1.0f + x * (1.0f - s));
  }
};
struct Relu {
  KOKKOS_INLINE_FUNCTION float forward(float x) const { return x > 0.0f ? x : 0.0f; }
  KOKKOS_INLINE_FUNCTION float backward(float x, float g) const { return x > 0.0f ? g : 0.0f; }
};

}  // namespace bmt::kernels::ewise
