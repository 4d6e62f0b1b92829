#pragma once
// Parameter initializers. An initializer fills any slice of a parameter's flattened value on its
// own, from a key that names the parameter and the whole tensor's element indices, so that every
// rank can initialize just its shard of its tensor-parallel part and the whole parameter is the same
// for every world size and mesh.
#include <cstdint>
#include <functional>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt {
struct PartMap;  // nn/part_map.hpp
}

namespace bmt::init {

// Fills `out` (contiguous, 1-D, the parameter's dtype) with elements [first, first + out.numel())
// of the flattened part this rank holds; `map` gives each element's index in the whole flattened
// parameter (the identity without tensor parallelism), and a value depends only on that index and
// `key`, which is unique to the parameter (seed and dotted name).
using Fn = std::function<void(const Tensor& out, std::int64_t first, const PartMap& map, std::uint64_t key)>;

Fn zeros();
Fn ones();
Fn constant(float value);
Fn normal(float mean, float std);
inline Fn normal(float std) { return normal(0.0f, std); }
Fn uniform(float low, float high);
// A user-defined value per element index of the whole flattened parameter (evaluated on the host).
Fn from_function(std::function<float(std::int64_t index)> value);

}  // namespace bmt::init
