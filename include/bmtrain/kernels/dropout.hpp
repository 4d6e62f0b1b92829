#pragma once
// Dropout's mask, as a pure function of (key, element index): element i is kept when
// random::uniform(key, i) >= p, and kept elements are scaled by 1 / (1 - p). The same key gives the
// same mask on every backend and at every call, so backward (and a recompute of the forward during
// activation checkpointing) regenerates it instead of storing it.
#include <cstdint>

#include "bmtrain/kernels/random.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels {

KOKKOS_INLINE_FUNCTION bool dropout_keeps(std::uint64_t key, std::uint64_t index, float p) {
  return random::uniform(key, index) >= p;
}

// y = x * mask / (1 - p); x and y contiguous, same shape and floating dtype (y may be x).
// p in [0, 1]; p == 1 drops everything (y = 0). Element i takes the mask's element first + i.
void dropout_apply(const Tensor& x, float p, std::uint64_t key, const Tensor& y, std::uint64_t first = 0);

}  // namespace bmt::kernels
