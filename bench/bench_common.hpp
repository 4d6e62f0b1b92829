#pragma once
// What the single-process benchmarks share: a dtype from a benchmark argument, deterministic
// inputs, and a wait for the compute stream (every timed iteration ends with one).
#include <cstdint>
#include <vector>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::bench {

// 0: f32, 1: bf16, 2: f16.
inline DType dtype_arg(std::int64_t a) { return a == 0 ? DType::f32 : a == 1 ? DType::bf16 : DType::f16; }

inline void sync() { context().compute_stream().synchronize(); }

// Values in [-1, 1) from a 64-bit LCG: the same tensor for the same seed on every build.
inline Tensor random_tensor(const Shape& shape, DType dtype, std::uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(numel_of(shape)));
  std::uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<std::int64_t>(s >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
  }
  return Tensor::from_floats(v, shape, dtype);
}

}  // namespace bmt::bench
