#pragma once
// Element-type conversion between a file's dtype and a caller's buffer, on the host.
#include <cstddef>

#include "bmtrain/runtime/dtype.hpp"

namespace bmt::io::detail {

// Every value of `from` is exactly representable in `to` (identity, bf16/f16 -> f32, integer widening).
bool is_lossless(DType from, DType to);
// A conversion exists at all: lossless ones, plus rounding between floating types (f32 -> bf16/f16,
// bf16 <-> f16), which callers must ask for explicitly.
bool is_convertible(DType from, DType to);
// Converts n elements (from != to); float targets round to nearest even.
void convert(const void* src, DType from, void* dst, DType to, std::size_t n);

}  // namespace bmt::io::detail
