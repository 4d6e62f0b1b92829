#pragma once
// A fixed pseudo-random f32 tensor in [-1, 1) for the autograd tests: the same values for the same
// shape and seed on every build.
#include <cstdint>
#include <vector>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

inline Tensor sample(const Shape& shape, std::uint32_t seed) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<std::size_t>(n));
  std::uint32_t s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
  }
  return Tensor::from_floats(v, shape);
}

}  // namespace bmt
