#pragma once
// Parameter initializers. An initializer fills any slice of a parameter's flattened value on its
// own, from a key that names the parameter, so that every rank can initialize just its shard and
// the gathered result is the same for every world size.
#include <cstdint>
#include <functional>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt::init {

// Fills `out` (contiguous, 1-D, the parameter's dtype) with elements [first, first + out.numel())
// of the flattened parameter; `key` is unique to the parameter (seed and dotted name).
using Fn = std::function<void(const Tensor& out, std::int64_t first, std::uint64_t key)>;

Fn zeros();
Fn ones();
Fn constant(float value);
Fn normal(float mean, float std);
inline Fn normal(float std) { return normal(0.0f, std); }
Fn uniform(float low, float high);
// A user-defined value per element index of the flattened parameter (evaluated on the host).
Fn from_function(std::function<float(std::int64_t index)> value);

}  // namespace bmt::init
